/**
 * Forwards added to a running board's user-mode network (HMP `hostfwd_add` and
 * `hostfwd_remove`, through QMP's human-monitor-command): how the host reaches a guest port the
 * command line did not forward, such as an app's published port, known only once the app runs.
 * QEMU's user network is the only way into the guest from the host, and a forward belongs to
 * one QEMU process: a board restored from its ready state, or started again after a power
 * cycle, has only its command line's (./qemu-argv.ts), and whoever needs more adds them again.
 *
 * HMP answers in text, not with QMP errors (net/slirp.c, QEMU 7.2): `hostfwd_add` prints
 * nothing when it worked, "Could not set up host forwarding rule '<rule>'" when the host port
 * cannot be bound, and other sentences for a rule it cannot read or a netdev it does not know;
 * `hostfwd_remove` prints "host forwarding rule for <rule> removed" or "... not found".
 */
import { isIPv4 } from 'node:net';
import { FleetlabError } from '../src/errors.js';
import { NETDEV_ID } from './qemu-argv.js';
import type { HmpRunner } from './qmp.js';

/**
 * The guest's address on QEMU's user network (its DHCP server's first lease, which the boards'
 * networkd takes): where a forward whose guest address is left empty arrives.
 */
export const GUEST_ADDRESS = '10.0.2.15';

/** One tcp forward from an address of this machine to a port of the guest. */
export interface HostForward {
  /** An IPv4 address of this machine QEMU binds (slirp takes IPv4 only): a loopback one. */
  readonly hostAddress: string;
  readonly hostPort: number;
  /** Reached at GUEST_ADDRESS. */
  readonly guestPort: number;
}

function checked(fwd: Partial<HostForward>): void {
  // The rule is one word of a monitor command line: nothing but an address and numbers in it.
  if (!isIPv4(fwd.hostAddress ?? '')) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `host forward: ${JSON.stringify(fwd.hostAddress)} is not an IPv4 address (QEMU's user network binds IPv4 only)`);
  for (const [name, port] of [['host', fwd.hostPort], ['guest', fwd.guestPort]] as const) {
    if (port !== undefined && (!Number.isInteger(port) || port < 1 || port > 65535)) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `host forward: the ${name} port must be 1-65535, got ${port}`);
  }
}

/** `tcp:<address>:<port>`: how both commands name a forward. */
const hostSide = (fwd: Pick<HostForward, 'hostAddress' | 'hostPort'>) => `tcp:${fwd.hostAddress}:${fwd.hostPort}`;

export function hostfwdAddCommand(fwd: HostForward, netdev: string = NETDEV_ID): string {
  checked(fwd);
  // An empty guest address: QEMU's default, the guest's own (GUEST_ADDRESS).
  return `hostfwd_add ${netdev} ${hostSide(fwd)}-:${fwd.guestPort}`;
}

export function hostfwdRemoveCommand(fwd: Pick<HostForward, 'hostAddress' | 'hostPort'>, netdev: string = NETDEV_ID): string {
  checked(fwd);
  return `hostfwd_remove ${netdev} ${hostSide(fwd)}`;
}

/**
 * What `hostfwd_add` printed, read: `added`, or `taken` when the host side could not be bound
 * (another process has that address and port: the caller may try another). Anything else is
 * an error with QEMU's own words.
 */
export function hostfwdAddResult(output: string, fwd: HostForward): 'added' | 'taken' {
  const said = output.trim();
  if (said === '') return 'added';
  if (said.startsWith('Could not set up host forwarding rule')) return 'taken';
  throw new FleetlabError('SUP_ERR_HOST', `QEMU refused the forward ${hostSide(fwd)} to the guest's port ${fwd.guestPort}: ${said}`);
}

/** What `hostfwd_remove` printed, read: whether there was such a forward to remove. */
export function hostfwdRemoveResult(output: string, fwd: Pick<HostForward, 'hostAddress' | 'hostPort'>): boolean {
  const said = output.trim();
  if (said.endsWith(' removed')) return true;
  if (said.endsWith(' not found')) return false;
  throw new FleetlabError('SUP_ERR_HOST', `QEMU could not remove the forward ${hostSide(fwd)}: ${said || 'no answer'}`);
}

/** Adds `fwd` to the running QEMU behind `monitor`; `taken` when its host address and port are in use. */
export async function addHostForward(monitor: HmpRunner, fwd: HostForward): Promise<'added' | 'taken'> {
  return hostfwdAddResult(await monitor.hmp(hostfwdAddCommand(fwd)), fwd);
}

/** Removes `fwd` from the running QEMU behind `monitor`; false when it had none such. */
export async function removeHostForward(monitor: HmpRunner, fwd: Pick<HostForward, 'hostAddress' | 'hostPort'>): Promise<boolean> {
  return hostfwdRemoveResult(await monitor.hmp(hostfwdRemoveCommand(fwd)), fwd);
}
