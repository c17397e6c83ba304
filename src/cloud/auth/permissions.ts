/**
 * Each principal's permissions as filters on each resource, in the OData expression form
 * the planner ANDs into every query and every PATCH/DELETE. A user reaches fleets through
 * organization membership; everything else hangs off a fleet or a device.
 */
import { eqField, type Expr } from '../odata/expr.js';
import type { Access, Rule } from '../odata/plan.js';
import type { Principal } from './principal.js';

/** The organization at `pathToOrg` has the user as a member. */
const memberOf = (pathToOrg: string[], userId: number): Expr => ({
  k: 'lambda',
  scope: null,
  path: [...pathToOrg, 'organization_membership'],
  fn: 'any',
  v: 'm',
  body: eqField(['user'], userId, 'm'),
});

const or = (a: Expr, b: Expr): Expr => ({ k: 'or', l: a, r: b });

/** Path from each fleet-owned resource to its organization. */
const toOrganization: Record<string, string[]> = {
  organization: [],
  application: ['organization'],
  my_application: ['organization'],
  device: ['belongs_to__application', 'organization'],
  device_tag: ['device', 'belongs_to__application', 'organization'],
  image_install: ['device', 'belongs_to__application', 'organization'],
  device_environment_variable: ['device', 'belongs_to__application', 'organization'],
  device_config_variable: ['device', 'belongs_to__application', 'organization'],
  application_tag: ['application', 'organization'],
  application_environment_variable: ['application', 'organization'],
  application_config_variable: ['application', 'organization'],
  service: ['application', 'organization'],
  release: ['belongs_to__application', 'organization'],
  image: ['is_a_build_of__service', 'application', 'organization'],
  release_image: ['is_part_of__release', 'belongs_to__application', 'organization'],
  image__is_part_of__release: ['is_part_of__release', 'belongs_to__application', 'organization'],
};

/**
 * For a user, these resources' rules are their owner's rule through the named link (member
 * of the same organization). Not fleet-owned ones: a fleet is also readable when public,
 * its devices and releases are not.
 */
const userInherits: Record<string, string> = {
  device_tag: 'device',
  image_install: 'device',
  device_environment_variable: 'device',
  device_config_variable: 'device',
  image: 'is_a_build_of__service',
  release_image: 'is_part_of__release',
  image__is_part_of__release: 'is_part_of__release',
};

function userAccess(userId: number, actor: number): Access {
  const read = (resource: string): Rule => {
    if (resource === 'device_type') return 'all';
    if (resource === 'user') return eqField(['id'], userId);
    if (resource === 'organization_membership') return eqField(['user'], userId);
    if (resource === 'api_key') return eqField(['is_of__actor'], actor);
    const path = toOrganization[resource];
    if (!path) return 'none';
    const own = memberOf(path, userId);
    return resource === 'application' ? or(own, eqField(['is_public'], true)) : own;
  };
  return {
    read,
    inheritsRead: (resource) => userInherits[resource],
    write(resource) {
      if (resource === 'organization' || resource === 'user' || resource === 'organization_membership') return 'none';
      if (resource === 'api_key') return eqField(['is_of__actor'], actor);
      const path = toOrganization[resource];
      return path ? memberOf(path, userId) : 'none';
    },
  };
}

/** A device key: its own device and what hangs off it; its fleet and the fleet's releases, read-only. */
function deviceAccess(deviceId: number, applicationId: number): Access {
  const own: Record<string, Expr> = {
    device: eqField(['id'], deviceId),
    device_tag: eqField(['device'], deviceId),
    image_install: eqField(['device'], deviceId),
    device_environment_variable: eqField(['device'], deviceId),
    device_config_variable: eqField(['device'], deviceId),
  };
  const fleet: Record<string, Expr> = {
    application: eqField(['id'], applicationId),
    my_application: eqField(['id'], applicationId),
    release: eqField(['belongs_to__application'], applicationId),
    service: eqField(['application'], applicationId),
    image: eqField(['is_a_build_of__service', 'application'], applicationId),
    release_image: eqField(['is_part_of__release', 'belongs_to__application'], applicationId),
    image__is_part_of__release: eqField(['is_part_of__release', 'belongs_to__application'], applicationId),
    application_tag: eqField(['application'], applicationId),
    application_environment_variable: eqField(['application'], applicationId),
    application_config_variable: eqField(['application'], applicationId),
  };
  return {
    read: (r) => (r === 'device_type' ? 'all' : (own[r] ?? fleet[r] ?? 'none')),
    write: (r) => own[r] ?? 'none',
    // `device eq D` on a tag is `id eq D` on its device.
    inheritsRead: (r) => (r === 'device_tag' || r === 'device_environment_variable' || r === 'device_config_variable' ? 'device' : undefined),
  };
}

/** A provisioning key: register devices into its fleet, nothing else. */
function provisioningAccess(applicationId: number): Access {
  const rules: Record<string, Expr> = {
    application: eqField(['id'], applicationId),
    device: eqField(['belongs_to__application'], applicationId),
  };
  return {
    read: (r) => (r === 'device_type' ? 'all' : (rules[r] ?? 'none')),
    write: (r) => (r === 'device' ? rules.device! : 'none'),
  };
}

const everything: Access = { read: () => 'all', write: () => 'all' };

export function accessOf(p: Principal): Access {
  switch (p.kind) {
    case 'user':
      if (p.isAdmin) return everything;
      return userAccess(p.userId, p.actor);
    case 'device':
      return deviceAccess(p.deviceId, p.applicationId);
    case 'provisioning':
      return provisioningAccess(p.applicationId);
  }
}

/** my_application is the caller's own fleets, never the public ones, even for the admin. */
export function accessForRequest(p: Principal, resource: string): Access {
  const base = accessOf(p);
  if (resource !== 'my_application' || p.kind !== 'user') return base;
  const own = memberOf(['organization'], p.userId);
  return { read: (r) => (r === 'my_application' ? own : base.read(r)), write: (r) => (r === 'my_application' ? own : base.write(r)) };
}
