/**
 * Where an `image:` service's image comes from when the release is built in a private engine
 * for a board (arm64) and the device pulls it: the image is copied from this machine's dockerd
 * when that holds it for the device's architecture (a team loads its arm64 images there with
 * `docker load`), and otherwise left to the device, which pulls the reference as the compose
 * file names it, from that image's own registry, as a board in the field would.
 */
import type Docker from 'dockerode';
import { FleetlabError, errorText } from '../../src/errors.js';
import { streamDone } from '../../src/engine-client/engine-stream.js';

export interface ImageSource {
  /** This machine's dockerd, where a team keeps the images its compose file names. */
  docker: Docker;
  /** The architecture the device runs (an image config's `Architecture`). */
  architecture: string;
}

/** What became of an `image:` the build engine lacked. */
export type Adoption = { copied: true } | { copied: false; why: string };

const isNotFound = (err: unknown) => (err as { statusCode?: number }).statusCode === 404;

/**
 * Copies `ref` from the source engine into `into` (save, then load: the tag comes with it) when
 * the source has it for the device's architecture; otherwise says why the device is to pull it.
 */
export async function adoptImage(ref: string, into: Docker, source: ImageSource | undefined, where: string): Promise<Adoption> {
  if (!source) return { copied: false, why: 'it is not in the build engine' };
  let architecture: string;
  try {
    architecture = (await source.docker.getImage(ref).inspect()).Architecture;
  } catch (err) {
    if (isNotFound(err)) return { copied: false, why: "it is not in this machine's dockerd" };
    // No dockerd here is no reason to fail: the device can still pull the image itself.
    return { copied: false, why: `this machine's dockerd could not be asked (${errorText(err)})` };
  }
  if (architecture !== source.architecture) return { copied: false, why: `this machine's dockerd has it for ${architecture}, not ${source.architecture}` };
  try {
    const archive = await source.docker.getImage(ref).get();
    await streamDone(into, await into.loadImage(archive, { quiet: true }));
  } catch (err) {
    throw new FleetlabError('HIL_ERR_BUILD', `${where}: copying ${ref} from this machine's dockerd into the build engine failed: ${errorText(err)}`, { cause: err });
  }
  return { copied: true };
}
