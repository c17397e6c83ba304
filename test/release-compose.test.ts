/**
 * A team's compose file, read and checked: what maps to the target state, and one clear
 * error (file, key, fix) for everything that does not. Pure: text in, value or error out.
 */
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { findComposeFile, interpolate, loadCompose, parseCompose, parseDotEnv, splitWords } from '../hil/release/compose.js';
import { localTargetState, type Release } from '../hil/release/release.js';
import { checkWireState } from '../src/protocol/target-state.js';
import { FleetlabError } from '../src/errors.js';

const FILE = '/work/app/compose.yaml';

function failure(text: string): FleetlabError {
  try {
    parseCompose(text, FILE);
  } catch (err) {
    expect(err).toBeInstanceOf(FleetlabError);
    expect((err as FleetlabError).code).toBe('HIL_ERR_COMPOSE');
    return err as FleetlabError;
  }
  throw new Error('parseCompose accepted it');
}

describe('parseCompose', () => {
  it('maps the keys the target state carries', () => {
    const project = parseCompose(
      `
name: shop
x-common: &common
  restart: always
services:
  web:
    build:
      context: ./web
      dockerfile: Dockerfile.device
      args: { VERSION: 2 }
    image: shop/web:dev
    environment: [GREETING=hi, EMPTY=]
    labels: { io.platform.features.supervisor-api: 1 }
    volumes: [data:/data, cfg:/etc/app:ro]
    command: node server.js --port "8 0"
    network_mode: host
    <<: *common
  worker:
    image: fleetlab/busybox:latest
    command: ["sh", "-c", "sleep 1"]
    restart: on-failure
volumes:
  data: {}
  cfg:
`,
      FILE,
    );
    expect(project.name).toBe('shop');
    expect(project.volumes).toEqual(['data', 'cfg']);
    const [web, worker] = project.services;
    expect(web).toEqual({
      name: 'web',
      image: 'shop/web:dev',
      build: { context: '/work/app/web', dockerfile: 'Dockerfile.device', args: { VERSION: '2' } },
      environment: { GREETING: 'hi', EMPTY: '' },
      labels: { 'io.platform.features.supervisor-api': '1' },
      volumes: ['data:/data', 'cfg:/etc/app:ro'],
      command: ['node', 'server.js', '--port', '8 0'],
      networkMode: 'host',
      restart: 'always',
    });
    expect(worker).toMatchObject({ name: 'worker', image: 'fleetlab/busybox:latest', command: ['sh', '-c', 'sleep 1'], restart: 'on-failure' });
  });

  it('names the project after its directory when name: is absent', () => {
    expect(parseCompose('services: { a: { image: x } }', '/home/me/my-app/compose.yaml').name).toBe('my-app');
  });

  it('refuses a key the target state cannot carry, naming file, service, key and the fix', () => {
    const err = failure('services:\n  web:\n    image: x\n    healthcheck: { test: [CMD, "true"] }\n');
    expect(err.message).toBe(
      `${FILE}: services.web.healthcheck: is not supported by fleetlab yet: the device's target state has no place for it, so the service would run without it; remove it or use only build, cap_add, cap_drop, command, depends_on, devices, environment, image, labels, network_mode, networks, ports, privileged, restart, tmpfs, volumes`,
    );
    for (const key of ['expose', 'healthcheck', 'entrypoint', 'user']) {
      expect(failure(`services:\n  web:\n    image: x\n    ${key}: []\n`).message).toContain(`services.web.${key}: is not supported by fleetlab yet`);
    }
  });

  it('carries the host settings: privileged, capabilities, devices, tmpfs, ports', () => {
    const [svc] = parseCompose(
      'services:\n  io:\n    image: x\n    privileged: true\n    cap_add: [NET_ADMIN, SYS_RAWIO]\n    cap_drop: [MKNOD]\n    devices: ["/dev/i2c-1", "/dev/ttyUSB0:/dev/ttyS9:rw"]\n    tmpfs: /run\n    ports: ["8080:80", "127.0.0.1:5353:53/udp"]\n',
      FILE,
    ).services;
    expect(svc).toMatchObject({ privileged: true, capAdd: ['NET_ADMIN', 'SYS_RAWIO'], capDrop: ['MKNOD'], devices: ['/dev/i2c-1', '/dev/ttyUSB0:/dev/ttyS9:rw'], tmpfs: ['/run'], ports: ['8080:80', '127.0.0.1:5353:53/udp'] });
    expect(failure('services:\n  io: { image: x, ports: [80] }\n').message).toContain('services.io.ports: "80": must be a list of `[ip:]hostPort:containerPort[/tcp|/udp]` entries (a device has no random host port');
    expect(failure('services:\n  io: { image: x, devices: ["/tmp/x:/dev/x"] }\n').message).toContain('services.io.devices: "/tmp/x:/dev/x": must be a list of');
    expect(failure('services:\n  io: { image: x, privileged: "yes" }\n').message).toContain('services.io.privileged: must be true or false');
    expect(failure('services:\n  io: { image: x, cap_add: [net_admin] }\n').message).toContain('services.io.cap_add: "net_admin": must be a list of capability names');
  });

  it('carries networks and depends_on, in both of compose\'s syntaxes', () => {
    const project = parseCompose(
      'services:\n  db: { image: x, networks: [back] }\n  api:\n    image: x\n    networks: { back: null, front: {} }\n    depends_on: { db: { condition: service_started } }\n  web: { image: x, depends_on: [api, db] }\nnetworks: { back: {}, front: null, default: {} }\n',
      FILE,
    );
    expect(project.networks).toEqual(['back', 'front']);
    const [db, api, web] = project.services;
    expect(db).toMatchObject({ networks: ['back'] });
    expect(db!.dependsOn).toBeUndefined();
    expect(api).toMatchObject({ networks: ['back', 'front'], dependsOn: ['db'] });
    expect(web).toMatchObject({ dependsOn: ['api', 'db'] });
    expect(web!.networks).toBeUndefined();
  });

  it('refuses networks and depends_on it cannot honour, naming the fix', () => {
    expect(failure('services:\n  a: { image: x, networks: [back] }\n').message).toBe(`${FILE}: services.a.networks: "back" is not declared under top-level networks: (declare it as \`networks: { back: {} }\`)`);
    expect(failure('services:\n  a: { image: x, networks: { back: { aliases: [b] } } }\nnetworks: { back: {} }\n').message).toContain('services.a.networks.back: per-network options (aliases) are not supported by fleetlab');
    expect(failure('services:\n  a: { image: x, network_mode: host, networks: [default] }\n').message).toContain('services.a.networks: cannot be combined with network_mode');
    expect(failure('services:\n  a: { image: x }\nnetworks: { back: { driver: overlay } }\n').message).toContain('networks.back: network options (driver, external, ...) are not supported by fleetlab: the device creates bridge networks');
    expect(failure('services:\n  a: { image: x, depends_on: [db] }\n').message).toBe(`${FILE}: services.a.depends_on: "db" is not a service in this file (services: a)`);
    expect(failure('services:\n  a: { image: x, depends_on: [a] }\n').message).toContain('services.a.depends_on: a service cannot depend on itself');
    expect(failure('services:\n  a: { image: x, depends_on: [b] }\n  b: { image: x, depends_on: [c] }\n  c: { image: x, depends_on: [a] }\n').message).toBe(`${FILE}: services: depends_on goes round in a circle: a -> b -> c -> a; break one of these links`);
    expect(failure('services:\n  a: { image: x, depends_on: { b: { condition: service_healthy } } }\n  b: { image: x }\n').message).toContain('services.a.depends_on.b.condition: "service_healthy" is not supported by fleetlab (it has no healthchecks');
  });

  it('tells a misspelt key from a known one it cannot carry', () => {
    expect(failure('services:\n  web:\n    imgae: x\n').message).toContain('services.web.imgae: is not a compose key fleetlab knows (misspelt?)');
  });

  it('refuses bind mounts, undeclared volumes and the long syntax', () => {
    expect(failure('services:\n  web:\n    image: x\n    volumes: ["./src:/src"]\n').message).toContain('is a bind mount of a host path');
    expect(failure('services:\n  web:\n    image: x\n    volumes: ["data:/data"]\n').message).toContain('uses volume "data", which is not declared under top-level volumes:');
    expect(failure('services:\n  web:\n    image: x\n    volumes: [{ type: volume, source: d, target: /d }]\nvolumes: { d: {} }\n').message).toContain('the long volume syntax is not supported');
    expect(failure('services:\n  web:\n    image: x\nvolumes: { d: { driver: nfs } }\n').message).toContain('volumes.d: volume options');
  });

  it('refuses what cannot run at all', () => {
    expect(failure('services:\n  web:\n    environment: { A: 1 }\n').message).toContain('services.web: needs `image:` or `build:`');
    expect(failure('services: {}\n').message).toContain('services: needs at least one service');
    expect(failure('services:\n  web: { image: x, restart: sometimes }\n').message).toContain('services.web.restart: must be one of no, always, on-failure, unless-stopped');
    expect(failure('services:\n  web: { image: x, environment: [NOVALUE] }\n').message).toContain('services.web.environment.NOVALUE: has no value');
    expect(failure('services:\n  web: { image: x, command: "echo \'open" }\n').message).toContain('unterminated quote');
    expect(failure('services:\n  web: { build: "https://example.invalid/repo.git" }\n').message).toContain('a remote build context is not supported');
    expect(failure('secrets: {}\nservices:\n  web: { image: x }\n').message).toContain(`${FILE}: secrets: not supported by fleetlab`);
    expect(failure('services: [web]\n  oops: :\n').message).toContain(`${FILE}: not valid YAML`);
    expect(failure('- just\n- a list\n').message).toContain('expected a mapping with a `services:` key');
  });
});

describe('variables', () => {
  const where = () => 'compose.yaml: services.a.command';
  it('interpolates as compose does', () => {
    const vars = { TAG: '2', EMPTY: '' };
    expect(interpolate('app:${TAG} $TAG $$HOME $${TAG}', vars, where)).toBe('app:2 2 $HOME ${TAG}');
    expect(interpolate('${EMPTY:-d} ${EMPTY-d} ${NONE-d} ${NONE:-d}', vars, where)).toBe('d  d d');
    expect(interpolate('${TAG:?needed}', vars, where)).toBe('2');
  });
  it('says which variable is missing and where to set it', () => {
    expect(() => interpolate('x ${NONE}', {}, where)).toThrow('compose.yaml: services.a.command: variable NONE is not set: set it in the .env file next to the compose file or in your environment, or write ${NONE:-default}');
    expect(() => interpolate('${KEY:?the API key}', {}, where)).toThrow('variable KEY is required (the API key)');
    expect(() => interpolate('${A:=b}', {}, where)).toThrow('"${A:=b}" is not a variable compose understands (write $$ for a literal dollar)');
  });
  it('reads .env and the environment in loadCompose, the environment winning; x- blocks are left alone', () => {
    const dir = mkdtempSync(join(tmpdir(), 'fleetlab-compose-env-'));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    writeFileSync(join(dir, '.env'), '# tags\nTAG=1\nNAME="quoted"\n');
    writeFileSync(join(dir, 'compose.yaml'), 'x-unused: ${NEVER_SET}\nservices:\n  a: { image: "app:${TAG}", environment: { N: $NAME, S: "$$x" } }\n');
    expect(loadCompose(dir, {}).services[0]).toMatchObject({ image: 'app:1', environment: { N: 'quoted', S: '$x' } });
    expect(loadCompose(dir, { TAG: '7' }).services[0]!.image).toBe('app:7');
    expect(parseDotEnv('A=1\nB = two \n#C=3\nD=\'q\'\nbroken')).toEqual({ A: '1', B: 'two', D: 'q' });
  });
});

describe('splitWords', () => {
  it('splits as a shell would, without running one', () => {
    expect(splitWords(`a 'b c' "d \\"e\\"" f\\ g ''`)).toEqual(['a', 'b c', 'd "e"', 'f g', '']);
    expect(splitWords('  ')).toEqual([]);
    expect(splitWords('"open')).toBeUndefined();
  });
});

describe('findComposeFile / loadCompose', () => {
  it('finds compose.yaml before docker-compose.yml, and says what it looked for', () => {
    const dir = mkdtempSync(join(tmpdir(), 'fleetlab-compose-'));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    expect(() => findComposeFile(dir)).toThrow(`${dir}: no compose file here (looked for compose.yaml, compose.yml, docker-compose.yml, docker-compose.yaml)`);
    writeFileSync(join(dir, 'docker-compose.yml'), 'services: { a: { image: old } }\n');
    expect(findComposeFile(dir)).toBe(join(dir, 'docker-compose.yml'));
    writeFileSync(join(dir, 'compose.yaml'), 'services: { a: { image: new } }\n');
    expect(loadCompose(dir).services[0]!.image).toBe('new');
    expect(() => findComposeFile(join(dir, 'missing'))).toThrow('no such file or directory');
    mkdirSync(join(dir, 'sub'));
  });
});

describe('localTargetState', () => {
  const project = parseCompose(
    'services:\n  web:\n    build: ./web\n    environment: { A: "1" }\n    volumes: [data:/data]\n    restart: unless-stopped\n  side:\n    image: base:1\n    network_mode: host\nvolumes: { data: {} }\n',
    '/p/app/compose.yaml',
  );
  const release: Release = { project, images: { web: 'app-web:abc', side: 'base:1' }, imageIds: { web: 'sha256:1', side: 'sha256:2' }, commit: 'c0ffee', pulledAsNamed: [] };

  it('carries host settings to the target state', () => {
    const io = parseCompose('services:\n  io: { image: x, privileged: false, cap_add: [NET_ADMIN], devices: [/dev/i2c-1], tmpfs: [/run], ports: ["1:2"] }\n', '/p/app/compose.yaml');
    const state = localTargetState({ project: io, images: { io: 'x' }, imageIds: { io: 'sha256:9' }, commit: 'c', pulledAsNamed: [] }, { appId: 1, releaseId: 1 });
    expect(state.apps['1']!.services['1']).toMatchObject({ privileged: false, cap_add: ['NET_ADMIN'], devices: ['/dev/i2c-1'], tmpfs: ['/run'], ports: ['1:2'] });
  });

  it('carries networks and depends_on to the target state, which the device accepts', () => {
    const linked = parseCompose('services:\n  db: { image: x, networks: [back] }\n  api: { image: y, networks: [back, default], depends_on: [db] }\nnetworks: { back: {} }\n', '/p/app/compose.yaml');
    const state = localTargetState({ project: linked, images: { db: 'x', api: 'y' }, imageIds: { db: 'sha256:1', api: 'sha256:2' }, commit: 'c', pulledAsNamed: [] }, { appId: 1, releaseId: 1 });
    expect(checkWireState(state)).toEqual([]);
    expect(state.apps['1']!.networks).toEqual({ back: {} });
    expect(state.apps['1']!.services['1']).toMatchObject({ networks: ['back'] });
    expect(state.apps['1']!.services['2']).toMatchObject({ networks: ['back', 'default'], depends_on: ['db'] });
  });

  it('gives services ids in compose order and merges the deploy env over the file', () => {
    const state = localTargetState(release, { appId: 3, releaseId: 7, env: { A: '2', B: 'x' } });
    expect(checkWireState(state)).toEqual([]);
    expect(state.config).toEqual({ SUPERVISOR_LOCAL_MODE: '1' });
    const app = state.apps['3']!;
    expect(app).toMatchObject({ name: 'app', commit: 'c0ffee', releaseId: 7, volumes: { data: {} }, networks: {} });
    expect(app.services['1']).toEqual({ serviceName: 'web', serviceId: 1, imageId: 1, image: 'app-web:abc', environment: { A: '2', B: 'x' }, labels: {}, volumes: ['data:/data'], restart: 'unless-stopped' });
    expect(app.services['2']).toEqual({ serviceName: 'side', serviceId: 2, imageId: 2, image: 'base:1', environment: { B: 'x', A: '2' }, labels: {}, network_mode: 'host' });
  });
});
