/**
 * Log lines of the supervisor and its services, for `GET /v2/local/logs`. A bounded history
 * lets a client that connects just after an event still see it.
 */
import { EventEmitter } from 'node:events';

export interface LogLine {
  message: string;
  timestamp: number;
  serviceName: string;
}

export class LogBus {
  private readonly emitter = new EventEmitter();
  private readonly history: LogLine[] = [];

  constructor(private readonly historySize = 200) {
    this.emitter.setMaxListeners(0);
  }

  publish(line: LogLine): void {
    this.history.push(line);
    if (this.history.length > this.historySize) this.history.shift();
    this.emitter.emit('line', line);
  }

  recent(): LogLine[] {
    return [...this.history];
  }

  subscribe(listener: (line: LogLine) => void): () => void {
    this.emitter.on('line', listener);
    return () => this.emitter.off('line', listener);
  }
}
