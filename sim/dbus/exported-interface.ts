/**
 * The base class of every interface the simulated peers export.
 *
 * @jellybrick/dbus-next's Interface declares `$properties`, `$methods` and `$signals` as
 * instance fields (compiled to own properties set to undefined), which hide the member tables
 * that `configureMembers` puts on the subclass's prototype: the bus then answers every Get
 * with "No such property" and every call with UnknownMethod. Removing the empty own fields
 * lets the prototype's tables show through again.
 */
import * as dbus from '@jellybrick/dbus-next';

const MEMBER_TABLES = ['$properties', '$methods', '$signals'] as const;

export class ExportedInterface extends dbus.interface.Interface {
  constructor(name: string) {
    super(name);
    const self = this as unknown as Record<string, unknown>;
    for (const table of MEMBER_TABLES) if (Object.hasOwn(self, table) && self[table] === undefined) delete self[table];
  }
}
