/**
 * Runs one supervisor process from a config: builds the production adapters, applies the
 * stored target, listens, and stops cleanly on SIGINT/SIGTERM.
 */
import { pino } from 'pino';
import type { SupervisorConfig } from './config.js';
import { createHostAdapter } from './adapters/host.js';
import { createJournalAdapter } from './adapters/journal.js';
import { createLedAdapter, parseLedGpio } from './adapters/led.js';
import { Supervisor } from './supervisor.js';
import { untilStopped } from '../stop-signals.js';

export function buildProductionSupervisor(config: SupervisorConfig): Supervisor {
  const logger = pino({ level: config.logLevel, base: { svc: 'fleetlab-supervisor' } });
  const gpio = parseLedGpio(config.ledGpio);
  return new Supervisor({
    config,
    logger: {
      info: (m) => logger.info(m),
      warn: (m) => logger.warn(m),
      error: (m) => logger.error(m),
    },
    host: createHostAdapter({ busAddress: config.dbusAddress || undefined, proxyConfigDir: config.proxyConfigDir, proxyUnit: config.proxyUnit }),
    journal: createJournalAdapter({ directory: config.journalDirectory || undefined }),
    led: gpio === undefined ? undefined : createLedAdapter({ gpio, activeLow: config.ledActiveLow }),
  });
}

/** Starts the supervisor and returns once it listens; resolves `stopped` after a signal. */
export async function runSupervisor(config: SupervisorConfig): Promise<{ url: string; supervisor: Supervisor; stopped: Promise<void> }> {
  const supervisor = buildProductionSupervisor(config);
  await supervisor.start();
  const url = await supervisor.listen();
  supervisor.log.info(`Supervisor ${supervisor.version} listening on ${url}, device ${supervisor.uuid}`);
  const { done: stopped } = untilStopped(() => supervisor.close());
  return { url, supervisor, stopped };
}
