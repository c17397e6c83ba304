import { startPrivateBus } from '/work/main/sim/dbus/private-bus.ts';
import { DbusClient } from '/work/main/src/supervisor/adapters/dbus-client.ts';
import dbus from 'dbus-next';
import { mkdtempSync } from 'node:fs';
const dir = mkdtempSync('/tmp/flhost/bus-');
const bus = await startPrivateBus({ dir });
const svc = dbus.sessionBus({ busAddress: bus.address });
svc.on('error', (e) => console.log('svc error', e.message));
class Slow extends dbus.interface.Interface { Hang() { return new Promise(() => {}); } }
Slow.configureMembers({ methods: { Hang: { inSignature: '', outSignature: 's' } } });
await svc.requestName('org.test.slow', 4);
svc.export('/org/test', new Slow('org.test.Slow'));
const c = new DbusClient({ busAddress: bus.address });
const p = c.call({destination:'org.test.slow',path:'/org/test',interface:'org.test.Slow',member:'Hang'});
p.catch((e) => console.log('pending rejected:', e.message));
await new Promise((r) => setTimeout(r, 300));
await bus.stop();
await p.catch(() => {});
console.log('done');
