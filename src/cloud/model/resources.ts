/**
 * The resources of the cloud API, named as balena's v6 model names them (see
 * docs/cloud-model.md for the source of each name). Field names equal column names except
 * for aliases; link fields hold the target's id.
 */
import type { FieldDef, FieldType, LinkDef, Model, ResourceDef, ReverseLinkDef } from './types.js';

type FieldSpec = [name: string, type: FieldType, opts?: Partial<Omit<FieldDef, 'name' | 'type'>>];
type LinkSpec = [name: string, target: string, opts?: Partial<Omit<LinkDef, 'name' | 'target'>>];
type ReverseSpec = [name: string, source: string, via: string];

function resource(
  name: string,
  spec: { table?: string; fields: FieldSpec[]; links?: LinkSpec[]; reverse?: ReverseSpec[]; uniques?: string[][]; readOnlyResource?: boolean; notNull?: string[] },
): ResourceDef {
  const base: FieldDef[] = [
    { name: 'id', column: 'id', type: 'integer', readOnly: true, notNull: true },
    { name: 'created_at', column: 'created_at', type: 'datetime', readOnly: true, notNull: true },
  ];
  return {
    name,
    table: spec.table ?? name,
    fields: [...base, ...spec.fields.map(([n, type, o]) => ({ name: n, column: o?.column ?? n, type, ...(spec.notNull?.includes(n) ? { notNull: true } : {}), ...o }))],
    links: (spec.links ?? []).map(([n, target, o]) => ({ name: n, target, column: o?.column ?? n, ...o })),
    reverse: (spec.reverse ?? []).map(([n, source, via]): ReverseLinkDef => ({ name: n, source, via })),
    uniques: spec.uniques ?? [],
    readOnlyResource: spec.readOnlyResource,
  };
}

const tagLike = (): FieldSpec[] => [['tag_key', 'text', { required: true }], ['value', 'text', { required: true }]];
const varLike: FieldSpec[] = [['name', 'text', { required: true }], ['value', 'text', { required: true }]];

export const resourceList: ResourceDef[] = [
  resource('actor', { fields: [], readOnlyResource: true }),
  resource('user', {
    notNull: ['actor', 'username', 'is_admin'],
    fields: [
      ['actor', 'integer', { readOnly: true }],
      ['username', 'text', { required: true }],
      ['email', 'text'],
      ['is_admin', 'boolean', { hidden: true }],
    ],
    reverse: [['organization_membership', 'organization_membership', 'user']],
    uniques: [['username']],
  }),
  resource('organization', {
    notNull: ['name', 'handle'],
    fields: [['name', 'text', { required: true }], ['handle', 'text', { required: true }]],
    reverse: [
      ['application', 'application', 'organization'],
      ['organization_membership', 'organization_membership', 'is_member_of__organization'],
    ],
    uniques: [['handle']],
  }),
  resource('organization_membership', {
    fields: [],
    links: [['user', 'user', { required: true }], ['is_member_of__organization', 'organization', { required: true }]],
    uniques: [['user', 'is_member_of__organization']],
  }),
  resource('device_type', {
    notNull: ['slug', 'name'],
    fields: [['slug', 'text', { required: true }], ['name', 'text', { required: true }]],
    reverse: [
      ['describes_device', 'device', 'is_of__device_type'],
      ['is_default_for__application', 'application', 'is_for__device_type'],
    ],
    uniques: [['slug']],
    readOnlyResource: true,
  }),
  resource('application', {
    notNull: ['app_name', 'slug', 'uuid', 'actor', 'should_track_latest_release', 'is_host', 'is_public', 'is_archived', 'is_of__class'],
    fields: [
      ['app_name', 'text', { required: true }],
      ['slug', 'text'],
      ['uuid', 'text'],
      ['actor', 'integer', { readOnly: true }],
      ['should_track_latest_release', 'boolean'],
      ['is_host', 'boolean'],
      ['is_public', 'boolean'],
      ['is_archived', 'boolean'],
      ['is_of__class', 'text'],
    ],
    links: [
      ['organization', 'organization', { required: true }],
      ['is_for__device_type', 'device_type', { required: true }],
      ['should_be_running__release', 'release'],
    ],
    reverse: [
      ['owns__device', 'device', 'belongs_to__application'],
      ['owns__release', 'release', 'belongs_to__application'],
      ['service', 'service', 'application'],
      ['application_tag', 'application_tag', 'application'],
      ['application_environment_variable', 'application_environment_variable', 'application'],
      ['application_config_variable', 'application_config_variable', 'application'],
    ],
    uniques: [['slug'], ['uuid']],
  }),
  resource('device', {
    notNull: ['uuid', 'device_name', 'actor', 'is_online', 'status', 'update_failed', 'api_heartbeat_state', 'is_active', 'is_web_accessible', 'modified_at'],
    fields: [
      ['uuid', 'text'],
      ['device_name', 'text'],
      ['actor', 'integer', { readOnly: true }],
      ['is_online', 'boolean'],
      ['status', 'text'],
      ['update_failed', 'boolean', { readOnly: true }],
      ['api_heartbeat_state', 'text'],
      ['os_version', 'text'],
      ['os_variant', 'text'],
      ['supervisor_version', 'text'],
      ['ip_address', 'text'],
      ['public_address', 'text'],
      ['mac_address', 'text'],
      ['last_connectivity_event', 'datetime'],
      ['is_active', 'boolean'],
      ['is_web_accessible', 'boolean'],
      ['note', 'text'],
      ['location', 'text'],
      ['latitude', 'text'],
      ['longitude', 'text'],
      ['memory_usage', 'integer'],
      ['memory_total', 'integer'],
      ['cpu_usage', 'integer'],
      ['cpu_temp', 'integer'],
      ['storage_usage', 'integer'],
      ['storage_total', 'integer'],
      ['modified_at', 'datetime', { readOnly: true }],
    ],
    links: [
      ['belongs_to__application', 'application', { required: true }],
      ['is_of__device_type', 'device_type', { required: true }],
      // v6 pins a device with should_be_running__release; v7 renamed it is_pinned_on__release.
      ['should_be_running__release', 'release'],
      ['is_pinned_on__release', 'release', { column: 'should_be_running__release' }],
      ['is_running__release', 'release'],
    ],
    reverse: [
      ['device_tag', 'device_tag', 'device'],
      ['image_install', 'image_install', 'device'],
      ['device_environment_variable', 'device_environment_variable', 'device'],
      ['device_config_variable', 'device_config_variable', 'device'],
    ],
    uniques: [['uuid']],
  }),
  resource('device_tag', {
    notNull: ['tag_key', 'value'],
    fields: tagLike(),
    links: [['device', 'device', { required: true }]],
    uniques: [['device', 'tag_key']],
  }),
  resource('application_tag', {
    notNull: ['tag_key', 'value'],
    fields: tagLike(),
    links: [['application', 'application', { required: true }]],
    uniques: [['application', 'tag_key']],
  }),
  ...(['device_environment_variable', 'device_config_variable'] as const).map((n) =>
    resource(n, { fields: varLike, notNull: ['name', 'value'], links: [['device', 'device', { required: true }]], uniques: [['device', 'name']] }),
  ),
  ...(['application_environment_variable', 'application_config_variable'] as const).map((n) =>
    resource(n, { fields: varLike, notNull: ['name', 'value'], links: [['application', 'application', { required: true }]], uniques: [['application', 'name']] }),
  ),
  resource('release', {
    notNull: ['commit', 'status', 'semver', 'semver_major', 'semver_minor', 'semver_patch', 'is_final', 'is_invalidated'],
    fields: [
      ['commit', 'text', { required: true }],
      ['status', 'text', { required: true }],
      ['source', 'text'],
      ['composition', 'json'],
      ['semver', 'text'],
      ['semver_major', 'integer'],
      ['semver_minor', 'integer'],
      ['semver_patch', 'integer'],
      ['revision', 'integer'],
      ['is_final', 'boolean'],
      ['is_invalidated', 'boolean'],
      ['note', 'text'],
      ['known_issue_list', 'text'],
      ['start_timestamp', 'datetime'],
      ['end_timestamp', 'datetime'],
      ['update_timestamp', 'datetime'],
      ['release_version', 'text'],
    ],
    links: [
      ['belongs_to__application', 'application', { required: true }],
      ['is_created_by__user', 'user'],
    ],
    reverse: [
      ['contains__image', 'release_image', 'is_part_of__release'],
      ['release_image', 'release_image', 'is_part_of__release'],
      ['should_be_running_on__application', 'application', 'should_be_running__release'],
      ['should_be_running_on__device', 'device', 'should_be_running__release'],
      ['is_pinned_to__device', 'device', 'should_be_running__release'],
      ['is_running_on__device', 'device', 'is_running__release'],
    ],
    uniques: [['belongs_to__application', 'commit']],
  }),
  resource('service', {
    notNull: ['service_name'],
    fields: [['service_name', 'text', { required: true }]],
    links: [['application', 'application', { required: true }]],
    reverse: [['is_built_by__image', 'image', 'is_a_build_of__service']],
    uniques: [['application', 'service_name']],
  }),
  resource('image', {
    notNull: ['is_stored_at__image_location', 'status'],
    fields: [
      ['is_stored_at__image_location', 'text', { required: true }],
      ['status', 'text', { required: true }],
      ['image_size', 'bigint'],
      ['content_hash', 'text'],
      ['project_type', 'text'],
      ['dockerfile', 'text'],
      ['build_log', 'text'],
      ['error_message', 'text'],
      ['start_timestamp', 'datetime'],
      ['end_timestamp', 'datetime'],
      ['push_timestamp', 'datetime'],
    ],
    links: [['is_a_build_of__service', 'service', { required: true }]],
    reverse: [
      ['image_install', 'image_install', 'installs__image'],
      ['release_image', 'release_image', 'image'],
      ['is_part_of__release', 'release_image', 'image'],
    ],
  }),
  // What the device reports per service: written by PATCH /device/v3/state, read-only here.
  resource('image_install', {
    notNull: ['status'],
    readOnlyResource: true,
    fields: [
      ['status', 'text', { readOnly: true }],
      ['download_progress', 'integer', { readOnly: true }],
      ['install_date', 'datetime', { readOnly: true }],
    ],
    links: [
      ['device', 'device', { readOnly: true }],
      ['installs__image', 'image', { readOnly: true }],
      ['is_provided_by__release', 'release', { readOnly: true }],
    ],
    uniques: [['device', 'installs__image']],
  }),
  resource('release_image', {
    table: 'image__is_part_of__release',
    fields: [],
    links: [['image', 'image', { required: true }], ['is_part_of__release', 'release', { required: true }]],
    uniques: [['image', 'is_part_of__release']],
  }),
  resource('api_key', {
    notNull: ['is_of__actor', 'key_hash'],
    fields: [
      ['name', 'text'],
      ['description', 'text'],
      ['expiry_date', 'datetime'],
      // Whose key it is is fixed when the key is made (the /api-key endpoints): a key that
      // could be re-pointed would be a way into any other actor's records.
      ['is_of__actor', 'integer', { required: true, readOnly: true }],
      ['key_hash', 'text', { hidden: true }],
    ],
    uniques: [['key_hash']],
  }),
];

/** Names that address an existing resource's table: the reference's two names for one table. */
export const resourceAliases: Record<string, string> = {
  my_application: 'application',
  image__is_part_of__release: 'release_image',
};

export function buildModel(list: ResourceDef[] = resourceList): Model {
  const resources = new Map(list.map((r) => [r.name, r]));
  return {
    resources,
    get(name) {
      const own = resources.get(name);
      if (own) return own;
      const target = resourceAliases[name];
      const def = target ? resources.get(target) : undefined;
      return def ? { ...def, name } : undefined;
    },
  };
}

/** The record's table name as a resource (aliases resolved). */
export function baseResourceName(name: string): string {
  return resourceAliases[name] ?? name;
}
