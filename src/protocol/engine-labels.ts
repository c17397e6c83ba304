/**
 * The labels the supervisor puts on every engine object it manages (containers, volumes,
 * networks): how it finds its own after a restart, and how the harness, the simulator and the
 * reapers tell a device's objects from everything else on the engine.
 */
export const LABEL = {
  supervised: 'io.fleetlab.supervised',
  device: 'io.fleetlab.device',
  appId: 'io.fleetlab.app-id',
  serviceId: 'io.fleetlab.service-id',
  serviceName: 'io.fleetlab.service-name',
  imageId: 'io.fleetlab.image-id',
  releaseId: 'io.fleetlab.release-id',
  commit: 'io.fleetlab.commit',
  configHash: 'io.fleetlab.config-hash',
  volume: 'io.fleetlab.volume',
  network: 'io.fleetlab.network',
  supervisorNetwork: 'io.fleetlab.supervisor-network',
} as const;
