/**
 * "Is ganesha serving?": an ONC RPC NULL call (procedure 0, AUTH_NONE) to the NFS
 * program over TCP, the cheapest request an NFS server answers (RFC 5531, record marking
 * §11). A listening socket alone is not enough: ganesha binds its port before its
 * dispatcher threads run, and the kernel accepts connections into the backlog meanwhile.
 *
 * The encoder and the reply parser are pure (tested without a server); `probeRpcNull`
 * is the thin socket shell. A probe resolves to a typed outcome and never throws.
 */
import { connect } from 'node:net';

export const NFS_PROGRAM = 100003;

export type ProbeOutcome =
  | { kind: 'accepted' }
  | { kind: 'rejected'; detail: string }
  | { kind: 'unreachable'; detail: string };

/** The NULL call as one TCP record (last-fragment bit set). */
export function encodeNullCall(xid: number, program: number, version: number): Buffer {
  const body = Buffer.alloc(40);
  // xid, CALL (0), RPC version 2, program, version, procedure 0, cred and verf AUTH_NONE (0, 0).
  for (const [i, v] of [xid, 0, 2, program, version, 0, 0, 0, 0, 0].entries())
    body.writeUInt32BE(v >>> 0, i * 4);
  const mark = Buffer.alloc(4);
  mark.writeUInt32BE((0x80000000 | body.length) >>> 0, 0);
  return Buffer.concat([mark, body]);
}

/**
 * Reads a reply record: undefined while incomplete, else the outcome. Only a REPLY to
 * `xid` that is MSG_ACCEPTED with accept_stat SUCCESS counts as accepted.
 */
export function parseNullReply(data: Buffer, xid: number): ProbeOutcome | undefined {
  if (data.length < 4) return undefined;
  const mark = data.readUInt32BE(0);
  const length = mark & 0x7fffffff;
  if (data.length < 4 + length) return undefined;
  const body = data.subarray(4, 4 + length);
  if (body.length < 12) return { kind: 'rejected', detail: `reply of ${body.length} bytes is too short` };
  if (body.readUInt32BE(0) !== xid >>> 0) return { kind: 'rejected', detail: 'reply to another xid' };
  if (body.readUInt32BE(4) !== 1) return { kind: 'rejected', detail: 'not an RPC reply' };
  const replyStat = body.readUInt32BE(8);
  if (replyStat !== 0) return { kind: 'rejected', detail: `MSG_DENIED (${body.readUInt32BE(12)})` };
  if (body.length < 20) return { kind: 'rejected', detail: 'accepted reply is truncated' };
  const verfLength = body.readUInt32BE(16);
  const statAt = 20 + Math.ceil(verfLength / 4) * 4;
  if (body.length < statAt + 4) return { kind: 'rejected', detail: 'accepted reply is truncated' };
  const acceptStat = body.readUInt32BE(statAt);
  // 2 = PROG_MISMATCH: the program runs, but not this version (e.g. NFSv3 only).
  if (acceptStat !== 0) return { kind: 'rejected', detail: `accept_stat ${acceptStat}` };
  return { kind: 'accepted' };
}

/** One NULL call to host:port; resolves within `timeoutMs`. */
export function probeRpcNull(
  host: string,
  port: number,
  version: number,
  timeoutMs: number,
): Promise<ProbeOutcome> {
  const xid = (Math.random() * 0xffffffff) >>> 0;
  return new Promise((resolve) => {
    let received = Buffer.alloc(0);
    const socket = connect({ host, port });
    let done = false;
    const finish = (outcome: ProbeOutcome) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(outcome);
    };
    const timer = setTimeout(
      () => finish({ kind: 'unreachable', detail: `no reply within ${timeoutMs} ms` }),
      timeoutMs,
    );
    socket.on('connect', () => socket.write(encodeNullCall(xid, NFS_PROGRAM, version)));
    socket.on('data', (chunk: Buffer) => {
      received = Buffer.concat([received, chunk]);
      const outcome = parseNullReply(received, xid);
      if (outcome) finish(outcome);
    });
    socket.on('error', (err) => finish({ kind: 'unreachable', detail: err.message }));
    socket.on('close', () => finish({ kind: 'unreachable', detail: 'connection closed before a reply' }));
  });
}
