/**
 * How long the OS waits before it starts a supervisor that died: systemd's RestartSec in the
 * board's unit (device-image/board-layout.ts), and the simulated device's own restart.
 */
export const SUPERVISOR_RESTART_SEC = 2;
