"""Load a trace into Perfetto's own engine and query it with SQL, as Perfetto's UI does.

engine.py NODE UI_DIR TRACE SQL...

UI_DIR is a Perfetto UI build (its engine_bundle.js and trace_processor.wasm), run by NODE
through engine.js. The requests (append the trace, finalize it, one streaming query per SQL) are
encoded, and the rows decoded, by the `perfetto` package's own classes. Prints one JSON object:
{"load_error": null or what the engine said, "results": [[{column: value}, ...] per SQL]}
(the queries run only when the trace loaded). A query the engine refuses is an exit status 1.
"""
import json
import os
import struct
import subprocess
import sys

from perfetto.common.query_result_iterator import QueryResultIterator
from perfetto.trace_processor.platform import PlatformDelegate
from perfetto.trace_processor.protos import ProtoFactory

HERE = os.path.dirname(os.path.abspath(__file__))


class Engine:
    def __init__(self, node, ui_dir):
        self.protos = ProtoFactory(PlatformDelegate())
        self.rpc = self.protos.TraceProcessorRpc
        self.proc = subprocess.Popen(
            [node, os.path.join(HERE, "engine.js"), ui_dir],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self.seq = 0

    def _read(self, n):
        b = self.proc.stdout.read(n)
        if len(b) != n:
            raise ConnectionError(f"the engine exited ({self.proc.wait()})")
        return b

    def _reply(self):
        """The next TraceProcessorRpc of the stream (field 1, length-delimited)."""
        assert self._read(1)[0] == 0x0A, "not a TraceProcessorRpcStream"
        n = shift = 0
        while True:
            c = self._read(1)[0]
            n |= (c & 0x7F) << shift
            shift += 7
            if not c & 0x80:
                break
        m = self.rpc()
        m.ParseFromString(self._read(n))
        if m.HasField("fatal_error"):
            raise RuntimeError(m.fatal_error)
        return m

    def _send(self, request, data=None, sql=None):
        stream = self.protos.TraceProcessorRpcStream()
        m = stream.msg.add()
        self.seq += 1
        m.seq, m.request = self.seq, request
        if data is not None:
            m.append_trace_data = data
        if sql is not None:
            m.query_args.sql_query = sql
        b = stream.SerializeToString()
        self.proc.stdin.write(struct.pack("<I", len(b)) + b)
        self.proc.stdin.flush()

    def load(self, data, chunk=1 << 20):
        """None, or the error the engine reports for the trace."""
        for i in range(0, len(data), chunk):
            self._send(self.rpc.TPM_APPEND_TRACE_DATA, data=data[i : i + chunk])
            error = self._reply().append_result.error
            if error:
                return error
        self._send(self.rpc.TPM_FINALIZE_TRACE_DATA)
        return self._reply().finalize_data_result.error or None

    def query(self, sql):
        self._send(self.rpc.TPM_QUERY_STREAMING, sql=sql)
        result = self.protos.QueryResult()
        while not (result.batch and result.batch[-1].is_last_batch):
            result.MergeFrom(self._reply().query_result)
            if result.error:
                sys.exit(f"the engine refused {sql!r}: {result.error}")
        return [r.__dict__ for r in QueryResultIterator(result.column_names, result.batch)]

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def main(node, ui_dir, trace, *queries):
    engine = Engine(node, ui_dir)
    with open(trace, "rb") as f:
        error = engine.load(f.read())
    results = [] if error else [engine.query(q) for q in queries]
    engine.close()
    print(json.dumps({"load_error": error, "results": results}))


if __name__ == "__main__":
    main(*sys.argv[1:])
