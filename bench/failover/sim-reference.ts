/**
 * The sim-node figure printed next to the real-node run (--real-nodes), clearly from
 * another run: the leasehold mode of the newest NFS-client result file under
 * bench/results/ (failover-nfs-client-v3-*.json, the sim benchmark's) run on the same
 * ADC sync and node-monitor grace. `simReferenceOf` is pure (the file contents given);
 * `readSimReference` reads the directory.
 * Not guaranteed: that run's load or code matches this one's (its date and load are
 * carried along to say so).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Summary } from './stats.ts';

export interface SimReference {
  file: string;
  date: string;
  runs: number;
  loadMean?: number;
  detection: Summary;
  crashToServing: Summary;
  clientWriteGap: Summary;
}

interface ResultFile {
  date?: string;
  runs?: number;
  adcSync?: string;
  nodeMonitorGracePeriod?: string;
  load?: { oneMinute?: { mean?: number } };
  results?: Array<{ mode?: string; detection?: Summary; crashToServing?: Summary; clientWriteGap?: Summary }>;
}

/** The newest file's leasehold result on these timings, or undefined. */
export function simReferenceOf(
  files: ReadonlyArray<{ file: string; content: string }>,
  timings: { adcSync: string; nodeMonitorGracePeriod: string },
): SimReference | undefined {
  let best: SimReference | undefined;
  for (const { file, content } of files) {
    if (!/^failover-nfs-client-v3-.*\.json$/.test(file)) continue;
    let r: ResultFile;
    try {
      r = JSON.parse(content) as ResultFile;
    } catch {
      continue;
    }
    if (r.adcSync !== timings.adcSync || r.nodeMonitorGracePeriod !== timings.nodeMonitorGracePeriod)
      continue;
    const lh = r.results?.find((x) => x.mode === 'leasehold');
    if (!lh?.crashToServing || !lh.clientWriteGap || !lh.detection || !r.date) continue;
    if (best && Date.parse(best.date) >= Date.parse(r.date)) continue;
    best = {
      file,
      date: r.date,
      runs: r.runs ?? lh.crashToServing.n,
      ...(r.load?.oneMinute?.mean === undefined ? {} : { loadMean: r.load.oneMinute.mean }),
      detection: lh.detection,
      crashToServing: lh.crashToServing,
      clientWriteGap: lh.clientWriteGap,
    };
  }
  return best;
}

export function readSimReference(
  dir: string,
  timings: { adcSync: string; nodeMonitorGracePeriod: string },
): SimReference | undefined {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return undefined;
  }
  return simReferenceOf(
    names
      .filter((f) => f.endsWith('.json'))
      .map((file) => ({ file, content: readFileSync(join(dir, file), 'utf8') })),
    timings,
  );
}
