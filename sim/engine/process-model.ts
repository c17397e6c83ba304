/**
 * What a simulated container "does" once started. Nothing runs: the engine derives a small
 * behaviour from the container's command (Entrypoint + Cmd) and plays it with timers.
 *
 * The model (documented in sim/README.md):
 *  - fleetlab's test-app command (`echo "<banner>: started"; ... echo "<banner>: tick $i";
 *    sleep N ...` with a TERM trap) logs "<banner>: started", then "<banner>: tick i" every
 *    N s, and on SIGTERM logs "<banner>: stopping" and exits 0;
 *  - `sleep N` runs N s and exits 0; `exit N`, `true`, `false` exit at once with that code;
 *    `echo ...` (`echo ... >&2` on stderr) logs its words and exits 0. A shell script of such
 *    parts (`sh -c 'echo a; sleep 1; exit 3'`) plays them in order (the lines at once, the
 *    exit after the sum of the sleeps);
 *  - a label `io.fleetlab.sim.process` on the image or container (JSON
 *    `{"logEveryMs","line","exitAfterMs","exitCode","trapsSigterm"}`) states the behaviour
 *    outright;
 *  - anything else runs silently until stopped.
 * Like PID 1 in a real container, a process without a TERM trap ignores SIGTERM: `stop`
 * waits its timeout and then kills it (exit 137).
 */
export interface Behaviour {
  /** Lines logged at once. */
  startLines: Array<{ stream: 'stdout' | 'stderr'; text: string }>;
  /** A repeating line (`{i}` is the tick number). */
  tick?: { everyMs: number; line: string };
  /** Exits by itself after this long with exitCode. */
  exitAfterMs?: number;
  exitCode: number;
  trapsSigterm: boolean;
  /** Logged when SIGTERM is handled. */
  stopLine?: string;
}

export const PROCESS_LABEL = 'io.fleetlab.sim.process';

interface LabelBehaviour {
  logEveryMs?: number;
  line?: string;
  exitAfterMs?: number;
  exitCode?: number;
  trapsSigterm?: boolean;
}

function fromLabel(json: string): Behaviour | undefined {
  try {
    const b = JSON.parse(json) as LabelBehaviour;
    return {
      startLines: [],
      ...(b.logEveryMs && b.line ? { tick: { everyMs: b.logEveryMs, line: b.line } } : {}),
      ...(b.exitAfterMs !== undefined ? { exitAfterMs: b.exitAfterMs } : {}),
      exitCode: b.exitCode ?? 0,
      trapsSigterm: b.trapsSigterm ?? true,
    };
  } catch {
    return undefined;
  }
}

/** Words of a simple shell `echo` argument list, with quotes removed. */
function echoWords(args: string): string {
  return args.trim().replace(/^(["'])(.*)\1$/, '$2');
}

function fromScript(script: string): Behaviour {
  const banner = /echo "([^"]+): started"/.exec(script);
  if (banner && /tick/.test(script)) {
    const every = /sleep (\d+(?:\.\d+)?)/.exec(script);
    return {
      startLines: [{ stream: 'stdout', text: `${banner[1]}: started` }],
      tick: { everyMs: Number(every?.[1] ?? 2) * 1000, line: `${banner[1]}: tick {i}` },
      exitCode: 0,
      trapsSigterm: /trap .*TERM/.test(script),
      stopLine: `${banner[1]}: stopping`,
    };
  }
  const behaviour: Behaviour = { startLines: [], exitCode: 0, trapsSigterm: /trap .*TERM/.test(script) };
  let elapsed = 0;
  let finite = true;
  for (const raw of script.split(/;|&&|\n/)) {
    const part = raw.trim();
    let m: RegExpExecArray | null;
    if ((m = /^echo (.*?)\s*(1?>&2)$/.exec(part))) behaviour.startLines.push({ stream: 'stderr', text: echoWords(m[1]!) });
    else if ((m = /^echo (.*)$/.exec(part))) behaviour.startLines.push({ stream: 'stdout', text: echoWords(m[1]!) });
    else if ((m = /^sleep (\d+(?:\.\d+)?)$/.exec(part))) elapsed += Number(m[1]) * 1000;
    else if ((m = /^exit (\d+)$/.exec(part))) {
      behaviour.exitCode = Number(m[1]);
      break;
    } else if (part === 'true' || part === '') continue;
    else if (part === 'false') {
      behaviour.exitCode = 1;
      break;
    } else finite = false;
  }
  if (finite) behaviour.exitAfterMs = elapsed;
  return behaviour;
}

export function behaviourOf(command: string[], labels: Record<string, string>): Behaviour {
  const label = labels[PROCESS_LABEL];
  if (label) {
    const b = fromLabel(label);
    if (b) return b;
  }
  const [file = '', ...args] = command;
  const base = file.split('/').pop()!;
  if ((base === 'sh' || base === 'bash') && args[0] === '-c' && args[1] !== undefined) return fromScript(args[1]);
  if (base === 'sh' || base === 'bash') return { startLines: [], exitCode: 0, exitAfterMs: 0, trapsSigterm: false }; // no tty, stdin closed
  if (['sleep', 'echo', 'true', 'false'].includes(base)) return fromScript([base, ...args].join(' '));
  return { startLines: [], exitCode: 0, trapsSigterm: false };
}
