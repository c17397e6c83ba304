/**
 * The one error family of fleetlab. Every failure that can reach an HTTP client is a
 * FleetlabError with a code from this catalogue; the API maps it to a response in one place
 * (src/supervisor/api/errors.ts). docs/errors.md lists the same codes and a test keeps the
 * two in step.
 */
export const errorCatalogue = {
  SUP_ERR_BAD_REQUEST: { status: 400, summary: 'The request body, query or path is malformed or fails its schema.' },
  SUP_ERR_MULTI_CONTAINER: { status: 400, summary: 'A v1 app endpoint was called for an app with more than one service.' },
  SUP_ERR_NOT_LOCAL_MODE: { status: 400, summary: 'A local-mode endpoint was called while the device is not in local mode.' },
  SUP_ERR_UNAUTHORIZED: { status: 401, summary: 'Missing or wrong API key, or a scoped key naming another app.' },
  SUP_ERR_NOT_FOUND: { status: 404, summary: 'Unknown app, service or route.' },
  SUP_ERR_LOCKED: { status: 423, summary: 'Refused because an update lock is held; retry with force to override.' },
  SUP_ERR_CLOUD_UNREACHABLE: { status: 503, summary: 'The call needs the cloud API, which is not configured or not reachable.' },
  SUP_ERR_TOOL_MISSING: { status: 500, summary: 'A system tool the supervisor needs is not installed.' },
  SUP_ERR_ENGINE: { status: 500, summary: 'The container engine failed or is unreachable.' },
  SUP_ERR_HOST: { status: 500, summary: 'The host OS services (D-Bus) failed or are unreachable.' },
  SUP_ERR_TIMEOUT: { status: 504, summary: 'A wait (src/wait.ts) ended unmet: its deadline passed, or what it waited on went away; the message names what was awaited and the last value or error seen.' },
  SUP_ERR_INTERNAL: { status: 500, summary: 'Anything else.' },
  CLOUD_ERR_BAD_REQUEST: { status: 400, summary: 'Cloud API: malformed OData URL or body, unknown resource or field, wrong type.' },
  CLOUD_ERR_UNAUTHORIZED: { status: 401, summary: 'Cloud API: missing, unknown or expired key.' },
  CLOUD_ERR_FORBIDDEN: { status: 401, summary: 'Cloud API: the key may not create or link the record it names.' },
  CLOUD_ERR_NOT_FOUND: { status: 404, summary: 'Cloud API: no such route (unknown resources are 400).' },
  CLOUD_ERR_UNIQUE: { status: 409, summary: 'Cloud API: a unique field or field set already has that value.' },
  CLOUD_ERR_REFERENCED: { status: 409, summary: 'Cloud API: the record is still referenced by another record.' },
  CLOUD_ERR_DEVICE_OFFLINE: { status: 404, summary: 'Cloud API: no online device matched the proxy call.' },
  CLOUD_ERR_DEVICE_TIMEOUT: { status: 504, summary: 'Cloud API: the device did not answer the proxy call in time.' },
  CLOUD_ERR_REPLICA: { status: 502, summary: "Cloud API: the device's tunnel is on another cloud replica that could not be reached." },
  CLOUD_ERR_INTERNAL: { status: 500, summary: 'Cloud API: anything else (database failure).' },
  HIL_ERR_COMPOSE: { status: 400, summary: 'Harness: a compose file is unreadable, malformed, or uses a key fleetlab does not carry.' },
  HIL_ERR_CONFIG: { status: 400, summary: 'Harness: fleetlab.config.ts asks for options that cannot go together.' },
  HIL_ERR_BUILD: { status: 400, summary: "Harness: a release's image could not be built or is not in the engine, or the local base image could not be made." },
  HIL_ERR_CAPABILITY: { status: 400, summary: "Harness: a spec used a protocol the run's target does not provide." },
  HIL_ERR_DEPLOY: { status: 500, summary: "Harness: a release was refused by the device or did not reach running in time, the device to deploy to did not answer or refused the key, or a service's published port asked for is not there." },
  HIL_ERR_NATIVE_MODULE: { status: 500, summary: 'A native addon fleetlab needs is not built in this installation.' },
  HIL_ERR_CAPTURE: { status: 400, summary: 'Capture and replay: the device cannot be reached or refuses the key, or a bundle file is not one, is cut short or damaged, is of a newer format, or cannot be written where asked.' },
  HIL_ERR_REGISTRY: { status: 500, summary: "Harness: the registry or build engine for a device that pulls could not start, or refused a release's images." },
  HIL_ERR_FLEET: { status: 400, summary: "Harness: the fleet fixture was not given its size, or a fleet was given a release with a service to build." },
  HIL_ERR_LAB: { status: 400, summary: 'Lab: the lab file is malformed, its lease store cannot be opened, a board is held by another run, a lease was lost, every board a run may use is offline or quarantined, or another lab watch is running.' },
  HIL_ERR_BOARD_OFFLINE: { status: 503, summary: 'Lab: a board did not answer again within its timeout after its power control; it is marked offline in the lab and the test is an infrastructure failure, not a device failure.' },
  HIL_ERR_PERMISSION: { status: 500, summary: 'Harness: as a user other than root, something a target needs is not open to that user (a temporary directory or lock another user owns, unprivileged user namespaces, building the container target base, which needs root once); the message says what to do.' },
  HIL_ERR_BOARD_INSTALL: { status: 400, summary: 'Board install: the board cannot be reached, is not one the supervisor runs on, lacks packages it could not install, or a step failed.' },
} as const satisfies Record<string, { status: number; summary: string }>;

export type ErrorCode = keyof typeof errorCatalogue;

export class FleetlabError extends Error {
  readonly code: ErrorCode;
  readonly statusCode: number;

  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'FleetlabError';
    this.code = code;
    this.statusCode = errorCatalogue[code].status;
  }
}

export const badRequest = (message: string) => new FleetlabError('SUP_ERR_BAD_REQUEST', message);
export const notFound = (message: string) => new FleetlabError('SUP_ERR_NOT_FOUND', message);
export const locked = (message: string) => new FleetlabError('SUP_ERR_LOCKED', message);
export const unauthorized = () => new FleetlabError('SUP_ERR_UNAUTHORIZED', 'Unauthorized');

export function isFleetlabError(err: unknown): err is FleetlabError {
  return err instanceof FleetlabError;
}

/** Text of any thrown value, for logs and error bodies. */
export function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
