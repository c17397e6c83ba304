/**
 * Child process of test/led-blink.test.ts: the production LED adapter and Blinker, run inside
 * the simulated GPIO namespace. Prints JSON lines so the test can line up its observations.
 * Usage: led-blink-child.ts [durationMs] [lingerMs]
 */
import { createLedAdapter } from '../../src/supervisor/adapters/led.js';
import { Blinker } from '../../src/supervisor/blink.js';

const durationMs = Number(process.argv[2] ?? 15_000);
const lingerMs = Number(process.argv[3] ?? 1_000);
const now = () => performance.timeOrigin + performance.now();

const led = createLedAdapter({ gpio: { chip: 'pinctrl-bcm2835', offset: 17 } });
const failures: string[] = [];
const blinker = new Blinker({ led, durationMs, log: { warn: (_obj, msg) => failures.push(msg ?? 'warn') } });

console.log(JSON.stringify({ event: 'start', at: now() }));
blinker.blink();
await blinker.whenIdle();
console.log(JSON.stringify({ event: 'end', at: now(), failures }));
// Stay alive with the line exported so a loop that failed to stop would still be seen.
await new Promise((resolve) => setTimeout(resolve, lingerMs));
await led.close();
console.log(JSON.stringify({ event: 'closed', at: now() }));
process.exitCode = failures.length === 0 ? 0 : 1;
