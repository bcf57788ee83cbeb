/**
 * dev/nfs-client/writer-lines.ts and the option checks of writer-process.ts: nfs-writer's
 * JSON lines parse into typed events, bad lines become error values naming the rule,
 * the record bytes match what the C writer writes, and bad options are refused by name.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  parseRecord,
  parseWriterLine,
  recordBytes,
  WriterLineError,
} from '../../dev/nfs-client/writer-lines.ts';
import { writerOptionProblems } from '../../dev/nfs-client/writer-process.ts';

describe('nfs-client writer lines', () => {
  it('parses each event kind nfs-writer prints', () => {
    const lines = [
      '{"event":"start","ms":10698932.488,"pid":29172,"writer":1,"version":"4.0","host":"127.0.0.1","port":42049,"file":"w.log","recordSize":64,"startSeq":1,"timeoutMs":2000,"backoffMs":100,"backoffMaxMs":1000}',
      '{"event":"connected","seq":1,"ms":10698939.719,"handle":"430000011244edfb"}',
      '{"event":"ack","seq":1,"ms":10698940.793,"sentMs":10698939.740}',
      '{"event":"error","kind":"grace","op":"open","seq":44,"rc":-34,"ms":10766826.455,"message":"open call failed with \\"NFS4ERR_GRACE(-5)\\""}',
      '{"event":"exit","ms":10699045.439,"acked":5,"nextSeq":6,"connects":1,"staleHandles":0,"errors":{"timeout":0,"stale":0,"grace":0,"connection":0,"other":0},"signalled":false}',
    ];
    const events = lines.map(parseWriterLine);
    assert.deepEqual(
      events.map((e) => (e instanceof WriterLineError ? e.message : e.event)),
      ['start', 'connected', 'ack', 'error', 'exit'],
    );
    const failure = events[3];
    assert.ok(failure !== undefined && !(failure instanceof WriterLineError) && failure.event === 'error');
    if (failure.event !== 'error') return;
    assert.equal(failure.kind, 'grace');
    assert.equal(failure.message, 'open call failed with "NFS4ERR_GRACE(-5)"');
  });

  it('returns an error value naming the rule for a bad line', () => {
    const cases: Array<[string, RegExp]> = [
      ['nfs-writer: usage', /not JSON/],
      ['[1]', /event must be one of/],
      ['{"event":"ack","seq":"1","ms":1,"sentMs":1}', /ack needs a number seq/],
      [
        '{"event":"error","kind":"weird","op":"write","seq":1,"rc":0,"ms":1,"message":""}',
        /error kind must be one of timeout, stale, grace, connection, other/,
      ],
      [
        '{"event":"start","ms":1,"pid":1,"writer":1,"version":"4.1","recordSize":64,"startSeq":1}',
        /version "3" or "4.0"/,
      ],
      [
        '{"event":"exit","ms":1,"acked":1,"nextSeq":2,"connects":1,"staleHandles":0,"errors":{},"signalled":true}',
        /exit needs errors/,
      ],
    ];
    for (const [line, rule] of cases) {
      const parsed = parseWriterLine(line);
      assert.ok(parsed instanceof WriterLineError, line);
      assert.match(parsed.message, rule);
      assert.equal(parsed.code, 'E_WRITER_LINE');
    }
  });

  it("reproduces the C writer's records byte for byte and parses them back", () => {
    // As nfs-writer wrote it against ganesha (hexdump of the export's file).
    const fromC = `leasehold-nfs seq=1 writer=1 ${'.'.repeat(34)}\n`;
    assert.equal(fromC.length, 64);
    assert.ok(recordBytes(1, 1, 64).equals(Buffer.from(fromC)));
    assert.deepEqual(parseRecord(recordBytes(123456, 42, 48)), { seq: 123456, writer: 42 });
    assert.equal(parseRecord(Buffer.alloc(64)), undefined);
    const flipped = recordBytes(5, 1, 64);
    flipped[40] = 0x78;
    assert.equal(parseRecord(flipped), undefined, 'padding must be dots');
    // The longest header still fits the smallest record.
    assert.deepEqual(parseRecord(recordBytes(1_000_000_000, 999_999_999, 48)), {
      seq: 1_000_000_000,
      writer: 999_999_999,
    });
  });

  it('refuses bad writer options by name', () => {
    const ok = {
      version: 3,
      host: '127.0.0.1',
      port: 2049,
      mountPort: 20048,
      exportPath: '/export',
      file: 'w',
    } as const;
    assert.deepEqual(writerOptionProblems(ok), []);
    assert.deepEqual(writerOptionProblems({ ...ok, mountPort: undefined }), [
      'mountPort: required with version 3',
    ]);
    assert.deepEqual(writerOptionProblems({ ...ok, version: 4, mountPort: undefined }), []);
    assert.deepEqual(writerOptionProblems({ ...ok, timeoutMs: 1500 }), [
      'timeoutMs=1500: must be whole seconds (libnfs 4.0)',
    ]);
    assert.deepEqual(writerOptionProblems({ ...ok, recordSize: 4096, file: 'a/b' }), [
      'file=a/b: must be a plain file name',
      'recordSize=4096: must be an integer from 48 to 3072',
    ]);
  });
});
