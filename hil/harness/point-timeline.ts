/**
 * A sweep point's device timeline: the recording a spec's device gets, started when the point's
 * device is fresh, drawn only when the point broke. Where the page goes is the caller's (a file
 * beside `fleetlab sweep`'s captures, an attachment of the spec's report).
 */
import type { DeviceUnderTest } from '../../device-access/protocols.js';
import type { StepEmitter } from '../lib/steps.js';
import { renderTimelineHtml } from '../lib/timeline/render.js';
import type { PointRecording } from '../sweep/device.js';
import { TimelineRecorder } from './timeline-recorder.js';

/** `keep(pointId, html)` stores a broken point's page and resolves with where it is. */
export function pointRecording(device: DeviceUnderTest, steps: StepEmitter, keep: (pointId: string, html: string) => Promise<string>): PointRecording {
  const recorder = new TimelineRecorder(device, steps, Date.now(), device.facts?.timeScale).start();
  let finished = false;
  return {
    async finish({ id, failure }) {
      if (finished) return undefined;
      finished = true;
      await recorder.stop();
      if (!failure) return undefined;
      const timeline = await recorder.timeline({ title: `sweep point ${id}`, end: failure.at, failure });
      return keep(id, renderTimelineHtml(timeline));
    },
  };
}
