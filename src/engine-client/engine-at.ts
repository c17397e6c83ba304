/**
 * A Docker Engine API client that is known to answer, or the error that says none does at
 * that socket and what to do about it (`fix`, the caller's advice).
 */
import Docker from 'dockerode';
import { FleetlabError, errorText } from '../errors.js';

export async function engineAt(socketPath: string, fix = 'start dockerd (scripts/provision does) or pass --docker-socket', purpose = ''): Promise<Docker> {
  const docker = new Docker({ socketPath });
  try {
    await docker.ping();
  } catch (err) {
    throw new FleetlabError('SUP_ERR_ENGINE', `${purpose}no container engine answers at ${socketPath} (${errorText(err)}): ${fix}`);
  }
  return docker;
}
