/**
 * A team's compose file, read and checked: what maps to the target state, and one clear
 * error (file, key, fix) for everything that does not. Pure: text in, value or error out.
 */
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { Value } from '@sinclair/typebox/value';
import { describe, expect, it, onTestFinished } from 'vitest';
import { findComposeFile, ignoredWarning, interpolate, loadCompose, parseCompose, splitWords } from '../hil/release/compose.js';
import { ignoreMatches } from '../hil/release/compose-report.js';
import { localTargetState, type Release } from '../hil/release/release.js';
import { LocalTargetStateBody, checkWireState } from '../src/protocol/target-state.js';
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

  it('refuses a key the target state cannot carry, naming file, line, service, key and the fix', () => {
    const err = failure('services:\n  web:\n    image: x\n    expose: [80]\n');
    expect(err.message).toBe(
      `${FILE}:4: services.web.expose: is not supported by fleetlab yet: the device's target state has no place for it, so the service would run without it\n` +
        'fleetlab carries these service keys: build, cap_add, cap_drop, command, depends_on, devices, entrypoint, env_file, environment, extra_hosts, healthcheck, hostname, image, init, labels, network_mode, networks, ports, privileged, read_only, restart, shm_size, stop_grace_period, stop_signal, sysctls, tmpfs, ulimits, user, volumes, working_dir. ' +
        'Remove the others, or list the ones your app can run without under ignoreComposeKeys in fleetlab.config.ts (each is then left out of the release, with a warning at every run).',
    );
    for (const key of ['logging', 'secrets', 'security_opt', 'container_name']) {
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
    expect(failure('services:\n  a: { image: x, networks: [back] }\n').message).toBe(`${FILE}:2: services.a.networks: "back" is not declared under top-level networks: (declare it as \`networks: { back: {} }\`)`);
    expect(failure('services:\n  a: { image: x, networks: { back: { aliases: [b] } } }\nnetworks: { back: {} }\n').message).toContain('services.a.networks.back.aliases: per-network options are not supported by fleetlab');
    expect(failure('services:\n  a: { image: x, network_mode: host, networks: [default] }\n').message).toContain('services.a.networks: cannot be combined with network_mode');
    expect(failure('services:\n  a: { image: x }\nnetworks: { back: { driver: overlay } }\n').message).toContain(`${FILE}:3: networks.back.driver: network options (driver, external, ...) are not supported by fleetlab: the device creates bridge networks`);
    expect(failure('services:\n  a: { image: x, depends_on: [db] }\n').message).toBe(`${FILE}:2: services.a.depends_on: "db" is not a service in this file (services: a)`);
    expect(failure('services:\n  a: { image: x, depends_on: [a] }\n').message).toContain('services.a.depends_on: a service cannot depend on itself');
    expect(failure('services:\n  a: { image: x, depends_on: [b] }\n  b: { image: x, depends_on: [c] }\n  c: { image: x, depends_on: [a] }\n').message).toBe(`${FILE}:1: services: depends_on goes round in a circle: a -> b -> c -> a; break one of these links`);
    expect(failure('services:\n  a: { image: x, depends_on: { b: { condition: service_completed_successfully } } }\n  b: { image: x }\n').message).toContain('services.a.depends_on.b.condition: "service_completed_successfully" is not supported by fleetlab (the device does not wait for a service to exit)');
    expect(failure('services:\n  a: { image: x, depends_on: { b: { condition: service_healthy } } }\n  b: { image: x, healthcheck: { disable: true } }\n').message).toContain('services.a.depends_on.b.condition: service_healthy waits for b to be healthy, but its healthcheck is disabled');
    expect(failure('services:\n  a: { image: x, depends_on: { b: { condition: service_started, restart: true } } }\n  b: { image: x }\n').message).toContain('services.a.depends_on.b.restart: is not supported by fleetlab (supported: condition, required: true)');
  });

  it('tells a misspelt key from a known one it cannot carry', () => {
    expect(failure('services:\n  web:\n    imgae: x\n').message).toContain('services.web.imgae: is not a compose key fleetlab knows (misspelt?)');
  });

  it('refuses bind mounts, undeclared volumes and the long syntax', () => {
    expect(failure('services:\n  web:\n    image: x\n    volumes: ["./src:/src"]\n').message).toContain('is a bind mount of a host path');
    expect(failure('services:\n  web:\n    image: x\n    volumes: ["data:/data"]\n').message).toContain('uses volume "data", which is not declared under top-level volumes:');
    expect(failure('services:\n  web:\n    image: x\n    volumes: [{ type: volume, source: d, target: /d }]\nvolumes: { d: {} }\n').message).toContain('the long volume syntax is not supported');
    expect(failure('services:\n  web:\n    image: x\nvolumes: { d: { driver: nfs } }\n').message).toContain(':4: volumes.d.driver: volume options');
  });

  it('refuses what cannot run at all', () => {
    expect(failure('services:\n  web:\n    environment: { A: 1 }\n').message).toContain('services.web: needs `image:` or `build:`');
    expect(failure('services: {}\n').message).toContain('services: needs at least one service');
    expect(failure('services:\n  web: { image: x, restart: sometimes }\n').message).toContain('services.web.restart: must be one of no, always, on-failure, unless-stopped');
    expect(failure('services:\n  web: { image: x, environment: [NOVALUE] }\n').message).toContain('services.web.environment.NOVALUE: has no value');
    expect(failure('services:\n  web: { image: x, command: "echo \'open" }\n').message).toContain('unterminated quote');
    expect(failure('services:\n  web: { build: "https://example.invalid/repo.git" }\n').message).toContain('a remote build context is not supported');
    expect(failure('secrets: {}\nservices:\n  web: { image: x }\n').message).toContain(`${FILE}:1: secrets: not supported by fleetlab`);
    expect(failure('services: [web]\n  oops: :\n').message).toMatch(new RegExp(`^${FILE}:\\d+: not valid YAML`));
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
    expect(loadCompose(dir, { env: {} }).services[0]).toMatchObject({ image: 'app:1', environment: { N: 'quoted', S: '$x' } });
    expect(loadCompose(dir, { env: { TAG: '7' } }).services[0]!.image).toBe('app:7');
    // Read as compose reads it: export, a comment after a value, escapes in double quotes, ${VAR} from above.
    writeFileSync(join(dir, '.env'), 'export TAG=2 # pinned\nNAME="a\\nb ${TAG}"\n');
    expect(loadCompose(dir, { env: {} }).services[0]).toMatchObject({ image: 'app:2', environment: { N: 'a\nb 2' } });
    // A line it cannot read is named, with its file and line, rather than skipped.
    writeFileSync(join(dir, '.env'), 'TAG=1\nbro ken\n');
    expect(() => loadCompose(dir, { env: {} })).toThrow(`${join(dir, '.env')}:2: "bro ken" has no value`);
    // A key alone takes its value from the environment, as compose reads .env (not a problem).
    writeFileSync(join(dir, '.env'), 'TAG\nNAME=n\n');
    expect(loadCompose(dir, { env: { TAG: '9' } }).services[0]!.image).toBe('app:9');
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

describe('the container settings compose keys give a service', () => {
  const one = (yaml: string) => parseCompose(`services:\n  web:\n    image: x\n${yaml}`, FILE).services[0]!;
  const bad = (yaml: string) => failure(`services:\n  web:\n    image: x\n${yaml}`).message;

  it('reads healthcheck in both forms of test, with compose durations, and disable as ["NONE"]', () => {
    expect(one('    healthcheck:\n      test: curl -f http://localhost || exit 1\n      interval: 1m30s\n      timeout: 500ms\n      start_period: 2s\n      retries: 5\n').healthcheck).toEqual({
      test: ['CMD-SHELL', 'curl -f http://localhost || exit 1'], interval: '1m30s', timeout: '500ms', startPeriod: '2s', retries: 5,
    });
    expect(one('    healthcheck: { test: [CMD, wget, -q, "http://localhost"] }\n').healthcheck).toEqual({ test: ['CMD', 'wget', '-q', 'http://localhost'] });
    expect(one('    healthcheck: { disable: true }\n').healthcheck).toEqual({ test: ['NONE'] });
    // Timings alone keep the image's own test, as the engine merges them.
    expect(one('    healthcheck: { interval: 5s }\n').healthcheck).toEqual({ interval: '5s' });
  });

  it('reads entrypoint, user, working_dir, stop_signal, stop_grace_period, init, read_only and hostname', () => {
    expect(one('    entrypoint: /bin/sh -c "echo hi"\n    user: 1000\n    working_dir: /srv/app\n    stop_signal: SIGINT\n    stop_grace_period: 1m\n    init: true\n    read_only: false\n    hostname: web-1\n')).toMatchObject({
      entrypoint: ['/bin/sh', '-c', 'echo hi'], user: '1000', workingDir: '/srv/app', stopSignal: 'SIGINT', stopGracePeriod: '1m', init: true, readOnly: false, hostname: 'web-1',
    });
    // An empty entrypoint runs the command without the image's, as in compose.
    expect(one('    entrypoint: ""\n').entrypoint).toEqual([]);
    expect(one('    entrypoint: [tini, --]\n    user: "app:staff"\n')).toMatchObject({ entrypoint: ['tini', '--'], user: 'app:staff' });
  });

  it('reads sysctls, ulimits, extra_hosts and shm_size in their compose forms', () => {
    expect(one('    sysctls: { net.core.somaxconn: 1024, net.ipv4.tcp_syncookies: 0 }\n').sysctls).toEqual({ 'net.core.somaxconn': '1024', 'net.ipv4.tcp_syncookies': '0' });
    expect(one('    sysctls: [net.core.somaxconn=1024]\n').sysctls).toEqual({ 'net.core.somaxconn': '1024' });
    expect(one('    ulimits: { nproc: 65535, nofile: { soft: 20000, hard: 40000 } }\n').ulimits).toEqual({ nproc: { soft: 65535, hard: 65535 }, nofile: { soft: 20000, hard: 40000 } });
    expect(one('    extra_hosts: ["somehost:162.242.195.82", "otherhost=50.31.209.229", "myhostv6=[::1]", "v6:::1"]\n').extraHosts).toEqual([
      'somehost:162.242.195.82', 'otherhost:50.31.209.229', 'myhostv6:::1', 'v6:::1',
    ]);
    expect(one('    extra_hosts: { somehost: 162.242.195.82, multi: [10.0.0.1, 10.0.0.2] }\n').extraHosts).toEqual(['somehost:162.242.195.82', 'multi:10.0.0.1', 'multi:10.0.0.2']);
    for (const [size, bytes] of [['64m', 67108864], ['1gb', 1073741824], ['512k', 524288], ['1024', 1024], [2048, 2048]] as const) {
      expect(one(`    shm_size: ${JSON.stringify(size)}\n`).shmSize).toBe(bytes);
    }
  });

  it.each([
    ['    healthcheck: { test: [curl, x] }\n', 'services.web.healthcheck.test: a list must be ["CMD", program, args...], ["CMD-SHELL", command] or ["NONE"]'],
    ['    healthcheck: { interval: 30 }\n', 'services.web.healthcheck.interval: 30: must be a duration such as 30s, 1m30s or 500ms (write 30s for seconds)'],
    ['    healthcheck: { retries: -1 }\n', 'services.web.healthcheck.retries: must be a whole number, 0 or more'],
    ['    healthcheck: { test: "true", disable: true }\n', 'services.web.healthcheck.disable: cannot be combined with test'],
    ['    healthcheck: { test: "true", start_interval: 1s }\n', "services.web.healthcheck.start_interval: needs Engine API 1.44 (Docker Engine 25) and the device's engine speaks 1.41"],
    ['    working_dir: srv\n', 'services.web.working_dir: "srv": must be an absolute path in the container'],
    ['    stop_signal: term please\n', 'services.web.stop_signal: "term please": must be a signal such as SIGTERM'],
    ['    stop_grace_period: 10\n', 'services.web.stop_grace_period: 10: must be a duration such as 30s, 1m30s or 500ms (write 10s for seconds)'],
    ['    init: "yes"\n', 'services.web.init: must be true or false'],
    ['    hostname: "web_1"\n', 'services.web.hostname: "web_1": must be a host name'],
    ['    user: "a b"\n', 'services.web.user: "a b": must be a user'],
    ['    ulimits: { files: 10 }\n', 'services.web.ulimits.files: is not a ulimit (core, cpu,'],
    ['    ulimits: { nofile: { soft: 10, hard: 5 } }\n', 'services.web.ulimits.nofile: soft (10) must not exceed hard (5)'],
    ['    extra_hosts: [somehost]\n', 'services.web.extra_hosts: "somehost" is not `host:address`'],
    ['    shm_size: lots\n', 'services.web.shm_size: "lots": must be a size such as 64m, 1g or a number of bytes'],
    ['    sysctls: [net.core.somaxconn]\n', 'services.web.sysctls: list items must be `name=value`'],
  ])('refuses %j, saying what to write', (yaml, message) => {
    expect(bad(yaml)).toContain(message);
  });

  it('carries them and service_healthy to the target state, which the device accepts', () => {
    const project = parseCompose(
      'services:\n  db:\n    image: x\n    healthcheck: { test: "exit 0", interval: 1s }\n    stop_grace_period: 20s\n    shm_size: 64m\n    ulimits: { nofile: 1024 }\n  web:\n    image: y\n    depends_on: { db: { condition: service_healthy } }\n    entrypoint: []\n    extra_hosts: { db.local: 10.0.0.5 }\n',
      '/p/app/compose.yaml',
    );
    const state = localTargetState({ project, images: { db: 'x', web: 'y' }, imageIds: { db: 'sha256:1', web: 'sha256:2' }, commit: 'c', pulledAsNamed: [] }, { appId: 1, releaseId: 1 });
    expect(checkWireState(state)).toEqual([]);
    expect(state.apps['1']!.services['1']).toMatchObject({
      healthcheck: { test: ['CMD-SHELL', 'exit 0'], interval: '1s' }, stop_grace_period: '20s', shm_size: 67108864, ulimits: { nofile: { soft: 1024, hard: 1024 } },
    });
    expect(state.apps['1']!.services['2']).toMatchObject({ depends_on: { db: { condition: 'service_healthy' } }, entrypoint: [], extra_hosts: ['db.local:10.0.0.5'] });
    expect(Value.Check(LocalTargetStateBody, { local: state })).toBe(true);
  });
});

describe('env_file', () => {
  function app(files: Record<string, string>): string {
    const dir = mkdtempSync(join(tmpdir(), 'fleetlab-env-file-'));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    for (const [name, text] of Object.entries(files)) {
      mkdirSync(dirname(join(dir, name)), { recursive: true });
      writeFileSync(join(dir, name), text);
    }
    return dir;
  }

  it('reads the files relative to the compose file, in order, and environment: wins over them', () => {
    const dir = app({
      'compose.yaml': 'services:\n  web:\n    image: x\n    env_file: [common.env, config/web.env, { path: local.env, required: false }]\n    environment: { LEVEL: from-compose }\n',
      'common.env': '# shared\nLEVEL=common\nNAME=common\nexport EXPORTED=yes\n',
      'config/web.env': "NAME=web # the service\nQUOTED='$literal # kept'\nESCAPED=\"a\\nb ${NAME}-${HOME_DIR}\"\nYAMLISH: style\n",
    });
    expect(loadCompose(dir, { env: { HOME_DIR: '/home/app' } }).services[0]!.environment).toEqual({
      LEVEL: 'from-compose', NAME: 'web', EXPORTED: 'yes', QUOTED: '$literal # kept', ESCAPED: 'a\nb web-/home/app', YAMLISH: 'style',
    });
  });

  it('names the env file and its line for what it cannot read, and a file that is not there', () => {
    const dir = app({
      'compose.yaml': 'services:\n  web:\n    image: x\n    env_file: [bad.env, missing.env]\n',
      'bad.env': 'GOOD=1\nNOVALUE\nUNSET=${NOT_SET}\n',
    });
    const err = (() => {
      try {
        loadCompose(dir, { env: {} });
      } catch (e) {
        return e as FleetlabError;
      }
      throw new Error('loadCompose accepted it');
    })();
    const compose = join(dir, 'compose.yaml');
    expect(err.message).toBe(
      `${compose}: 2 problems:\n` +
        `  ${compose}:4: services.web.env_file[0]: ${join(dir, 'bad.env')}:2: "NOVALUE" has no value; fleetlab does not read values from your shell: write NOVALUE=value; ${join(dir, 'bad.env')}:3: variable NOT_SET is not set: set it in the .env file next to the compose file or in your environment, or write \${NOT_SET:-default}\n` +
        `  ${compose}:4: services.web.env_file[1]: ${join(dir, 'missing.env')} does not exist: create it, or write \`{ path: missing.env, required: false }\``,
    );
  });

  it('says so when compose text comes without its directory', () => {
    expect(failure('services:\n  web: { image: x, env_file: app.env }\n').message).toContain('(this compose text was given without its directory, so no file can be read)');
  });
});

describe('every problem at once', () => {
  const text = [
    'x-common: &common',
    '  logging: { driver: json-file }',
    'configs: {}',
    'services:',
    '  web:',
    '    image: x',
    '    <<: *common',
    '    expose: [80]',
    '    restart: sometimes',
    '    build: { context: ., target: prod }',
    '  db:',
    '    image: y',
    '    imgae: z',
    '    labels: { com.example.tier: back, broken: [1] }',
    '',
  ].join('\n');

  it('lists each refused key and bad value with its line (a merged key where it is written), refused keys first', () => {
    expect(failure(text).message.split('\n').slice(0, 8)).toEqual(
      [
        `${FILE}: 7 problems:`,
        `  ${FILE}:2: services.web.logging: is not supported by fleetlab yet: the device's target state has no place for it, so the service would run without it`,
        `  ${FILE}:3: configs: not supported by fleetlab (supported top-level keys: services, volumes, networks, name, version, x-*)`,
        `  ${FILE}:8: services.web.expose: is not supported by fleetlab yet: the device's target state has no place for it, so the service would run without it`,
        `  ${FILE}:10: services.web.build.target: is not supported by fleetlab (supported: context, dockerfile, args)`,
        `  ${FILE}:13: services.db.imgae: is not a compose key fleetlab knows (misspelt?)`,
        `  ${FILE}:9: services.web.restart: must be one of no, always, on-failure, unless-stopped (on-failure:N is not supported)`,
        `  ${FILE}:14: services.db.labels.broken: must be a string, number or boolean`,
      ],
    );
  });

  it('leaves out the keys ignoreComposeKeys names, with their lines, and still refuses the rest', () => {
    const project = (() => {
      try {
        return parseCompose(text, FILE, { ignore: ['logging', 'configs', 'services.*.expose', 'services.web.build.target', 'services.db.imgae'] });
      } catch (err) {
        return err as FleetlabError;
      }
    })();
    expect(project).toBeInstanceOf(FleetlabError);
    expect((project as FleetlabError).message).toBe(
      `${FILE}: 2 problems:\n  ${FILE}:9: services.web.restart: must be one of no, always, on-failure, unless-stopped (on-failure:N is not supported)\n  ${FILE}:14: services.db.labels.broken: must be a string, number or boolean`,
    );
    const fixed = text.replace('restart: sometimes', 'restart: always').replace(', broken: [1]', '');
    const read = parseCompose(fixed, FILE, { ignore: ['logging', 'configs', 'expose', 'services.*.build.target', 'services.db.imgae', 'secrets', 'services.web.tty'] });
    expect(read.ignored).toEqual([
      { key: 'configs', line: 3, entry: 'configs' },
      { key: 'services.web.logging', line: 2, entry: 'logging' },
      { key: 'services.web.expose', line: 8, entry: 'expose' },
      { key: 'services.web.build.target', line: 10, entry: 'services.*.build.target' },
      { key: 'services.db.imgae', line: 13, entry: 'services.db.imgae' },
    ]);
    expect(read.unusedIgnores).toEqual(['secrets', 'services.web.tty']);
    expect(read.services[0]).toMatchObject({ name: 'web', restart: 'always', build: { context: '/work/app' } });
    expect(ignoredWarning(FILE, read.ignored[1]!)).toBe(`${FILE}:2: services.web.logging is ignored (ignoreComposeKeys: "logging"): the device runs the service without it`);
  });

  it('matches an ignore entry by whole names: a bare name is a top-level or service key, * one name (a service name, dots and all)', () => {
    expect(ignoreMatches('logging', 'services.web.logging')).toBe(true);
    expect(ignoreMatches('logging', 'logging')).toBe(true);
    expect(ignoreMatches('logging', 'services.web.build.logging')).toBe(false);
    expect(ignoreMatches('services.*.expose', 'services.web.expose')).toBe(true);
    expect(ignoreMatches('services.web.expose', 'services.web2.expose')).toBe(false);
    expect(ignoreMatches('networks.*.driver', 'networks.back.driver')).toBe(true);
    // With the file's service names, a dotted service name is one name.
    expect(ignoreMatches('services.*.logging', 'services.web.v2.logging', ['web.v2'])).toBe(true);
    expect(ignoreMatches('services.web.v2.logging', 'services.web.v2.logging', ['web.v2'])).toBe(true);
    expect(ignoreMatches('logging', 'services.web.v2.logging', ['web.v2'])).toBe(true);
    expect(ignoreMatches('aliases', 'services.web.networks.back.aliases', ['web'])).toBe(false);
  });
});
