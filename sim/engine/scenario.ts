/**
 * Fault injection: scenario files (JSON, `fixtures/scenarios/*.json`, validated against
 * ScenarioSchema) and the live fault set the control API edits. A fault names what it hits
 * (an image ref; a container by name, image or label) and what happens.
 */
import { readFileSync } from 'node:fs';
import { Type, type Static } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { FleetlabError, errorText } from '../../src/errors.js';

const PullFault = Type.Object(
  {
    image: Type.String({ minLength: 1, description: 'image ref as pulled, e.g. fleetlab/test-app:2; * for every pull' }),
    failAfterBytes: Type.Optional(Type.Integer({ minimum: 0 })),
    message: Type.Optional(Type.String({ minLength: 1 })),
    stallAfterBytes: Type.Optional(Type.Integer({ minimum: 0 })),
    /** How many pulls it affects; absent: every pull. */
    times: Type.Optional(Type.Integer({ minimum: 1 })),
  },
  { additionalProperties: false },
);

const ContainerMatch = Type.Object(
  {
    name: Type.Optional(Type.String({ minLength: 1, description: 'regular expression on the container name' })),
    image: Type.Optional(Type.String({ minLength: 1 })),
    label: Type.Optional(Type.String({ minLength: 1, description: 'key or key=value' })),
  },
  { additionalProperties: false },
);

const ContainerFault = Type.Object(
  {
    match: ContainerMatch,
    exitCode: Type.Integer({ minimum: 0, maximum: 255 }),
    afterMs: Type.Integer({ minimum: 0 }),
    /** How many starts it affects; absent: every start (a crash loop under a restart policy). */
    times: Type.Optional(Type.Integer({ minimum: 1 })),
  },
  { additionalProperties: false },
);

const EngineRestart = Type.Object(
  { afterMs: Type.Integer({ minimum: 0 }), downMs: Type.Optional(Type.Integer({ minimum: 0 })) },
  { additionalProperties: false },
);

export const ScenarioSchema = Type.Object(
  {
    description: Type.Optional(Type.String()),
    bandwidth: Type.Optional(Type.Integer({ minimum: 1, description: 'registry bandwidth, bytes/s' })),
    diskFull: Type.Optional(Type.Boolean()),
    pulls: Type.Optional(Type.Array(PullFault)),
    containers: Type.Optional(Type.Array(ContainerFault)),
    engineRestarts: Type.Optional(Type.Array(EngineRestart)),
  },
  { additionalProperties: false },
);

export type Scenario = Static<typeof ScenarioSchema>;
export type PullFaultSpec = Static<typeof PullFault>;
export type ContainerFaultSpec = Static<typeof ContainerFault>;

/** Validates a parsed scenario; the error names the first bad field by its JSON path. */
export function validateScenario(value: unknown, source = 'scenario'): Scenario {
  if (Value.Check(ScenarioSchema, value)) {
    for (const [i, p] of ((value as Scenario).pulls ?? []).entries()) {
      if (p.failAfterBytes === undefined && p.stallAfterBytes === undefined) {
        throw new FleetlabError('SUP_ERR_BAD_REQUEST', `${source}: /pulls/${i}: needs failAfterBytes or stallAfterBytes`);
      }
    }
    return value as Scenario;
  }
  const first = [...Value.Errors(ScenarioSchema, value)][0];
  const path = first?.path || '/';
  throw new FleetlabError('SUP_ERR_BAD_REQUEST', `${source}: ${path}: ${first?.message ?? 'invalid'}`);
}

export function loadScenarioFile(path: string): Scenario {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new FleetlabError('SUP_ERR_BAD_REQUEST', `scenario ${path}: ${errorText(err)}`);
  }
  return validateScenario(parsed, `scenario ${path}`);
}

interface Counted<T> {
  spec: T;
  used: number;
}

/** The faults in force; consumed as they fire (`times`). */
export class FaultSet {
  diskFull = false;
  private pulls: Array<Counted<PullFaultSpec>> = [];
  private containers: Array<Counted<ContainerFaultSpec>> = [];

  apply(s: Scenario): void {
    if (s.diskFull !== undefined) this.diskFull = s.diskFull;
    for (const p of s.pulls ?? []) this.addPull(p);
    for (const c of s.containers ?? []) this.addContainer(c);
  }

  addPull(p: PullFaultSpec): void {
    this.pulls.push({ spec: p, used: 0 });
  }

  addContainer(c: ContainerFaultSpec): void {
    this.containers.push({ spec: c, used: 0 });
  }

  clear(): void {
    this.diskFull = false;
    this.pulls = [];
    this.containers = [];
  }

  /** The pull fault for this ref, counted as used. */
  takePull(ref: string): PullFaultSpec | undefined {
    const hit = this.pulls.find((p) => (p.spec.image === ref || p.spec.image === '*') && (p.spec.times === undefined || p.used < p.spec.times));
    if (hit) hit.used += 1;
    return hit?.spec;
  }

  /** Whether a stall for this ref is still in force (the control API may lift it). */
  stillStalled(spec: PullFaultSpec): boolean {
    return this.pulls.some((p) => p.spec === spec);
  }

  takeContainer(c: { name: string; image: string; labels: Record<string, string> }): ContainerFaultSpec | undefined {
    const hit = this.containers.find(({ spec, used }) => {
      if (spec.times !== undefined && used >= spec.times) return false;
      const m = spec.match;
      if (m.name && !new RegExp(m.name).test(c.name)) return false;
      if (m.image && m.image !== c.image) return false;
      if (m.label) {
        const [k, v] = m.label.split('=', 2) as [string, string | undefined];
        if (!(k in c.labels) || (v !== undefined && c.labels[k] !== v)) return false;
      }
      return true;
    });
    if (hit) hit.used += 1;
    return hit?.spec;
  }

  describe(): { diskFull: boolean; pulls: PullFaultSpec[]; containers: ContainerFaultSpec[] } {
    return { diskFull: this.diskFull, pulls: this.pulls.map((p) => p.spec), containers: this.containers.map((c) => c.spec) };
  }
}
