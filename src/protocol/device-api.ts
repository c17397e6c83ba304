/**
 * The device API's bodies, requests and replies, as one contract (docs/device-api.md): the
 * supervisor's routes return these types and the harness's client reads them, so a field the
 * one changes is a compile error in the other.
 */

/** A service's status in every state report. */
export type ServiceStatus =
  | 'Downloading' | 'Downloaded' | 'Installing' | 'Starting' | 'Running' | 'Stopping' | 'Stopped' | 'Exited' | 'Dead';
/** The device's status in `GET /v1/device`. */
export type DeviceStatus = 'Stopping' | 'Starting' | 'Downloading' | 'Installing' | 'Idle';

export interface Failed {
  status: 'failed';
  message: string;
}
export interface DataError {
  Data: string;
  Error: string;
}
export interface DeviceState {
  api_port: number;
  commit?: string;
  ip_address: string;
  mac_address: string;
  status: DeviceStatus;
  download_progress: number | null;
  os_version: string;
  supervisor_version: string;
  update_pending: boolean;
  update_downloaded: boolean;
  update_failed: boolean;
}
export interface AppInfo {
  appId: number;
  commit: string;
  imageId: string;
  containerId: string;
  env: Record<string, string>;
}
/** A healthcheck's verdict on a running container that has one (`healthcheck` in compose). */
export type Health = 'starting' | 'healthy' | 'unhealthy';
export interface ServiceState {
  status: ServiceStatus;
  releaseId: number;
  downloadProgress: number | null;
  /** Only while the service runs with a healthcheck. */
  health?: Health;
}
export type ApplicationsState = Record<string, { appId: number; commit: string; services: Record<string, ServiceState> }>;
export interface AppStateV2 {
  local: Record<string, { services: Record<string, { status: ServiceStatus; releaseId: number; download_progress: number | null; health?: Health }> }>;
  commit: string;
}
export interface StatusContainer {
  status: ServiceStatus;
  serviceName: string;
  appId: number;
  imageId: number;
  serviceId: number;
  containerId: string;
  createdAt: string;
  /** Only while the container runs with a healthcheck. */
  health?: Health;
}
/** An image of the target as the supervisor tracks it. */
export interface ImageStatus {
  name: string;
  appId: number;
  serviceName: string;
  imageId: number;
  engineImageId: string;
  status: 'Downloading' | 'Downloaded';
  downloadProgress: number | null;
  /** Why the last pull of this image failed; present only until a retry succeeds. */
  downloadError?: string;
}
/** An image in `GET /v2/state/status`: also under the name balena's clients read. */
export interface StatusImage extends ImageStatus {
  dockerImageId: string;
}
export interface StateStatus {
  status: 'success';
  appState: 'applying' | 'applied';
  overallDownloadProgress: number | null;
  containers: StatusContainer[];
  images: StatusImage[];
  release: string;
}
export interface ProxyConfig {
  type: 'socks4' | 'socks5' | 'http-connect' | 'http-relay';
  ip: string;
  port: number | string;
  login?: string;
  password?: string;
  noProxy?: string[];
}
export interface HostConfig {
  network: { hostname?: string; proxy?: Partial<ProxyConfig> | null; force?: boolean };
  force?: boolean;
}
export interface JournalLogsBody {
  all?: boolean;
  follow?: boolean;
  count?: number;
  unit?: string;
  containerId?: string;
  format?: string;
  since?: string;
  until?: string;
}
export type ServiceSelector = { serviceName: string; imageId?: number } | { imageId: number; serviceName?: string };
