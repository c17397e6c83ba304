/**
 * Errors the simulated engine answers with: an HTTP status and dockerd's `{"message": ...}`
 * body. Messages copy dockerd 20.10's wording, since clients (dockerode, the docker CLI, the
 * supervisor) show them to people and some match on them.
 */
export class EngineApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = 'EngineApiError';
  }
}

export const noSuchContainer = (ref: string) => new EngineApiError(404, `No such container: ${ref}`);
export const noSuchImage = (ref: string) => new EngineApiError(404, `No such image: ${ref}`);
export const noSuchImageInspect = (ref: string) => new EngineApiError(404, `no such image: ${ref}: No such image: ${ref}`);
export const noSuchVolume = (name: string) => new EngineApiError(404, `get ${name}: no such volume`);
export const noSuchNetwork = (ref: string) => new EngineApiError(404, `network ${ref} not found`);
export const badParameter = (message: string) => new EngineApiError(400, message);
export const conflict = (message: string) => new EngineApiError(409, message);
export const serverError = (message: string) => new EngineApiError(500, message);

/** The text dockerd reports when the disk under /var/lib/docker is full. */
export const noSpace = (path: string) => `${path}: no space left on device`;
