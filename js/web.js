// The web platform's core classes (DESIGN §9), compiled once and evaluated in
// every VM: DOMException, EventTarget, AbortController/AbortSignal,
// ReadableStream, WritableStream, TextEncoder/TextDecoder, structuredClone, queueMicrotask,
// atob/btoa, crypto and performance. The program evaluates to a function
// that the runtime calls with its Go natives (js_web.go); it defines the
// globals and returns the internals other parts of the platform use
// (web_fetch.js, the Go helpers jsReadableStream and jsStreamBytes).
(function (native) {
  "use strict";
  const g = globalThis;
  // Symbol.asyncIterator, which goja lacks, is defined beforehand (installAsyncIterator, jsruntime.go).
  const define = (obj, props) => {
    for (const k of Reflect.ownKeys(props)) {
      Object.defineProperty(obj, k, { value: props[k], writable: true, configurable: true, enumerable: false });
    }
  };
  const tag = (cls, name) => Object.defineProperty(cls.prototype, Symbol.toStringTag, { value: name, configurable: true });

  // ---- DOMException ----
  const legacyCodes = {
    IndexSizeError: 1, HierarchyRequestError: 3, WrongDocumentError: 4, InvalidCharacterError: 5,
    NoModificationAllowedError: 7, NotFoundError: 8, NotSupportedError: 9, InvalidStateError: 11,
    SyntaxError: 12, InvalidModificationError: 13, NamespaceError: 14, InvalidAccessError: 15,
    TypeMismatchError: 17, SecurityError: 18, NetworkError: 19, AbortError: 20, URLMismatchError: 21,
    QuotaExceededError: 22, TimeoutError: 23, InvalidNodeTypeError: 24, DataCloneError: 25,
  };
  class DOMException extends Error {
    constructor(message = "", name = "Error") {
      super(String(message));
      define(this, { name: String(name) });
    }
    get code() {
      return legacyCodes[this.name] || 0;
    }
  }
  tag(DOMException, "DOMException");
  const domError = (message, name) => new DOMException(message, name);

  // ---- EventTarget, Event, AbortController, AbortSignal ----
  const LISTENERS = Symbol("listeners");
  class Event {
    constructor(type, init) {
      if (arguments.length === 0) throw new TypeError("Event: the type argument is required");
      define(this, { type: String(type), timeStamp: Date.now() });
      this.bubbles = !!(init && init.bubbles);
      this.cancelable = !!(init && init.cancelable);
      this.defaultPrevented = false;
      this.target = null;
      this.currentTarget = null;
    }
    preventDefault() {
      if (this.cancelable) this.defaultPrevented = true;
    }
    stopPropagation() {}
    stopImmediatePropagation() {
      this._stop = true;
    }
  }
  tag(Event, "Event");
  class EventTarget {
    constructor() {
      define(this, { [LISTENERS]: new Map() });
    }
    addEventListener(type, listener, options) {
      if (listener == null) return;
      const once = typeof options === "object" && options !== null && !!options.once;
      const signal = typeof options === "object" && options !== null ? options.signal : undefined;
      if (signal && signal.aborted) return;
      let list = this[LISTENERS].get(type);
      if (!list) this[LISTENERS].set(type, (list = []));
      if (list.some((l) => l.listener === listener)) return;
      const entry = { listener, once };
      list.push(entry);
      if (signal) signal.addEventListener("abort", () => this.removeEventListener(type, listener));
    }
    removeEventListener(type, listener) {
      const list = this[LISTENERS].get(type);
      if (!list) return;
      const i = list.findIndex((l) => l.listener === listener);
      if (i >= 0) list[i].removed = true, list.splice(i, 1);
    }
    dispatchEvent(event) {
      if (!(event instanceof Event)) throw new TypeError("dispatchEvent: argument is not an Event");
      event.target = event.currentTarget = this;
      const handler = this["on" + event.type];
      const list = (this[LISTENERS].get(event.type) || []).slice();
      if (typeof handler === "function") list.unshift({ listener: handler, handler: true });
      for (const l of list) {
        if (l.removed) continue;
        if (l.once) this.removeEventListener(event.type, l.listener);
        try {
          if (typeof l.listener === "function") l.listener.call(this, event);
          else if (l.listener && typeof l.listener.handleEvent === "function") l.listener.handleEvent(event);
        } catch (e) {
          reportError(e);
        }
        if (event._stop) break;
      }
      event.currentTarget = null;
      return !event.defaultPrevented;
    }
  }
  tag(EventTarget, "EventTarget");
  // reportError reports an exception thrown by a listener or a callback the
  // platform called; it is logged, the caller carries on (as in browsers).
  function reportError(e) {
    try {
      console.error("Uncaught", e && e.stack ? e.stack : String(e));
    } catch (_) {}
  }

  const SIGNAL = Symbol("signal");
  class AbortSignal extends EventTarget {
    constructor(key) {
      if (key !== SIGNAL) throw new TypeError("Illegal constructor: use new AbortController().signal");
      super();
      this[SIGNAL] = { aborted: false, reason: undefined };
      this.onabort = null;
    }
    get aborted() {
      return this[SIGNAL].aborted;
    }
    get reason() {
      return this[SIGNAL].reason;
    }
    throwIfAborted() {
      if (this[SIGNAL].aborted) throw this[SIGNAL].reason;
    }
    static abort(reason) {
      const s = new AbortSignal(SIGNAL);
      abortSignal(s, reason);
      return s;
    }
    static timeout(ms) {
      const s = new AbortSignal(SIGNAL);
      if (!native.unrefTimeout) {
        throw new Error("AbortSignal.timeout cannot be used in workflow code (it is replayed and must be deterministic): move it into a step");
      }
      native.unrefTimeout(() => abortSignal(s, domError("The operation timed out.", "TimeoutError")), ms);
      return s;
    }
    static any(signals) {
      const s = new AbortSignal(SIGNAL);
      for (const x of signals) {
        if (x.aborted) {
          abortSignal(s, x.reason);
          return s;
        }
      }
      for (const x of signals) x.addEventListener("abort", () => abortSignal(s, x.reason), { once: true });
      return s;
    }
  }
  tag(AbortSignal, "AbortSignal");
  // abortSignal aborts s with reason (an AbortError by default) once.
  function abortSignal(s, reason) {
    const st = s[SIGNAL];
    if (st.aborted) return;
    st.aborted = true;
    st.reason = reason === undefined ? domError("This operation was aborted", "AbortError") : reason;
    s.dispatchEvent(new Event("abort"));
  }
  class AbortController {
    constructor() {
      define(this, { signal: new AbortSignal(SIGNAL) });
    }
    abort(reason) {
      abortSignal(this.signal, reason);
    }
  }
  tag(AbortController, "AbortController");

  // ---- ReadableStream ----
  const STREAM = Symbol("stream");
  const READER = Symbol("reader");
  // settleReads fulfils waiting reads from the queue, then, when the stream
  // is closed or errored, the rest.
  function settleReads(st) {
    while (st.reads.length > 0 && st.queue.length > 0) st.reads.shift().resolve({ value: st.queue.shift(), done: false });
    if (st.queue.length === 0 && st.closeRequested && st.state === "readable") st.state = "closed";
    if (st.state === "closed") {
      for (const r of st.reads.splice(0)) r.resolve({ value: undefined, done: true });
      if (st.reader) st.reader.closed.resolve();
    } else if (st.state === "errored") {
      for (const r of st.reads.splice(0)) r.reject(st.error);
      if (st.reader) st.reader.closed.reject(st.error);
    }
  }
  // pullIfNeeded calls the source's pull when a read waits or the queue is
  // below the high-water mark, never twice at once.
  function pullIfNeeded(st) {
    if (!st.started || st.state !== "readable" || st.closeRequested || !st.pull) return;
    if (st.reads.length === 0 && st.queue.length >= st.highWaterMark) return;
    if (st.pulling) {
      st.pullAgain = true;
      return;
    }
    st.pulling = true;
    let r;
    try {
      r = st.pull.call(st.source, st.controller);
    } catch (e) {
      errorStream(st, e);
      return;
    }
    Promise.resolve(r).then(
      () => {
        st.pulling = false;
        if (st.pullAgain) {
          st.pullAgain = false;
          pullIfNeeded(st);
        }
      },
      (e) => errorStream(st, e),
    );
  }
  function errorStream(st, e) {
    if (st.state !== "readable") return;
    st.state = "errored";
    st.error = e;
    st.queue = [];
    settleReads(st);
  }
  function deferred() {
    const d = {};
    d.promise = new Promise((resolve, reject) => ((d.resolve = resolve), (d.reject = reject)));
    d.promise.catch(() => {});
    return d;
  }
  class ReadableStreamDefaultController {
    constructor(key, st) {
      if (key !== STREAM) throw new TypeError("Illegal constructor");
      this[STREAM] = st;
    }
    get desiredSize() {
      const st = this[STREAM];
      if (st.state === "errored") return null;
      if (st.state === "closed") return 0;
      return st.highWaterMark - st.queue.length;
    }
    enqueue(chunk) {
      const st = this[STREAM];
      if (st.state !== "readable" || st.closeRequested) throw new TypeError("ReadableStream: cannot enqueue into a closed stream");
      st.queue.push(chunk);
      settleReads(st);
      pullIfNeeded(st);
    }
    close() {
      const st = this[STREAM];
      if (st.state !== "readable" || st.closeRequested) throw new TypeError("ReadableStream: the stream is already closed");
      st.closeRequested = true;
      settleReads(st);
    }
    error(e) {
      errorStream(this[STREAM], e);
    }
  }
  tag(ReadableStreamDefaultController, "ReadableStreamDefaultController");
  class ReadableStream {
    constructor(source, strategy) {
      source = source == null ? {} : source;
      if (source.type === "bytes") {
        // Byte streams are read like default streams (no BYOB readers).
      }
      const hwm = strategy && strategy.highWaterMark !== undefined ? Number(strategy.highWaterMark) : 1;
      if (!(hwm >= 0)) throw new RangeError("ReadableStream: highWaterMark must be a non-negative number");
      const st = {
        state: "readable", queue: [], reads: [], source, highWaterMark: hwm, reader: null, disturbed: false,
        pull: typeof source.pull === "function" ? source.pull : null, pulling: false, pullAgain: false,
        started: false, closeRequested: false, error: undefined,
      };
      st.controller = new ReadableStreamDefaultController(STREAM, st);
      this[STREAM] = st;
      let r;
      if (typeof source.start === "function") r = source.start.call(source, st.controller);
      Promise.resolve(r).then(
        () => {
          st.started = true;
          pullIfNeeded(st);
        },
        (e) => errorStream(st, e),
      );
    }
    get locked() {
      return this[STREAM].reader !== null;
    }
    getReader(options) {
      if (options && options.mode === "byob") throw new TypeError("ReadableStream: BYOB readers are not supported; use getReader()");
      return new ReadableStreamDefaultReader(this);
    }
    cancel(reason) {
      if (this.locked) return Promise.reject(new TypeError("ReadableStream: cannot cancel a locked stream"));
      return cancelStream(this[STREAM], reason);
    }
    tee() {
      const reader = this.getReader();
      const branches = [];
      let cancelled = 0;
      const pull = () =>
        reader.read().then(({ value, done }) => {
          for (const c of branches) {
            if (c.cancelled) continue;
            if (done) c.controller.close();
            else c.controller.enqueue(value);
          }
        });
      for (let i = 0; i < 2; i++) {
        const b = { cancelled: false };
        branches.push(b);
        b.stream = new ReadableStream(
          {
            start: (c) => void (b.controller = c),
            pull,
            cancel: (reason) => {
              b.cancelled = true;
              if (++cancelled === 2) return reader.cancel(reason);
            },
          },
          { highWaterMark: 0 },
        );
      }
      return [branches[0].stream, branches[1].stream];
    }
    async pipeTo(dest) {
      const reader = this.getReader();
      const writer = dest.getWriter();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        await writer.write(value);
      }
      await writer.close();
    }
    pipeThrough(pair) {
      this.pipeTo(pair.writable).catch(() => {});
      return pair.readable;
    }
    values(options) {
      const reader = this.getReader();
      const preventCancel = !!(options && options.preventCancel);
      return {
        next: () =>
          reader.read().then((r) => {
            if (r.done) reader.releaseLock();
            return r;
          }),
        return: (value) => {
          const p = preventCancel ? Promise.resolve() : reader.cancel(value);
          reader.releaseLock();
          return p.then(() => ({ value, done: true }));
        },
        [Symbol.asyncIterator]() {
          return this;
        },
      };
    }
    [Symbol.asyncIterator](options) {
      return this.values(options);
    }
    static from(iterable) {
      const it = iterable[Symbol.asyncIterator] ? iterable[Symbol.asyncIterator]() : iterable[Symbol.iterator]();
      return new ReadableStream(
        {
          pull: (c) =>
            Promise.resolve(it.next()).then((r) => {
              if (r.done) c.close();
              else c.enqueue(r.value);
            }),
          cancel: (reason) => (typeof it.return === "function" ? it.return(reason) : undefined),
        },
        { highWaterMark: 0 },
      );
    }
  }
  tag(ReadableStream, "ReadableStream");
  // cancelStream empties and closes the stream and tells its source.
  function cancelStream(st, reason) {
    st.disturbed = true;
    if (st.state === "closed") return Promise.resolve();
    if (st.state === "errored") return Promise.reject(st.error);
    st.queue = [];
    st.closeRequested = true;
    st.state = "closed";
    settleReads(st);
    const cancel = st.source.cancel;
    if (typeof cancel !== "function") return Promise.resolve();
    try {
      return Promise.resolve(cancel.call(st.source, reason)).then(() => undefined);
    } catch (e) {
      return Promise.reject(e);
    }
  }
  class ReadableStreamDefaultReader {
    constructor(stream) {
      if (!(stream instanceof ReadableStream)) throw new TypeError("ReadableStreamDefaultReader: argument is not a ReadableStream");
      const st = stream[STREAM];
      if (st.reader) throw new TypeError("ReadableStream: the stream is locked to another reader");
      this[READER] = st;
      st.reader = { closed: deferred() };
      if (st.state === "closed") st.reader.closed.resolve();
      if (st.state === "errored") st.reader.closed.reject(st.error);
      this[STREAM] = st.reader;
    }
    get closed() {
      return this[STREAM].closed.promise;
    }
    read() {
      const st = this[READER];
      if (!st || st.reader !== this[STREAM]) return Promise.reject(new TypeError("ReadableStreamDefaultReader: the reader was released"));
      st.disturbed = true;
      const d = deferred();
      st.reads.push(d);
      settleReads(st);
      pullIfNeeded(st);
      return d.promise;
    }
    cancel(reason) {
      const st = this[READER];
      if (!st || st.reader !== this[STREAM]) return Promise.reject(new TypeError("ReadableStreamDefaultReader: the reader was released"));
      return cancelStream(st, reason);
    }
    releaseLock() {
      const st = this[READER];
      if (!st || st.reader !== this[STREAM]) return;
      const e = new TypeError("ReadableStreamDefaultReader: the reader was released");
      for (const r of st.reads.splice(0)) r.reject(e);
      st.reader.closed.reject(e);
      st.reader = null;
      this[READER] = null;
    }
  }
  tag(ReadableStreamDefaultReader, "ReadableStreamDefaultReader");

  // ---- WritableStream ----
  // Writes reach the sink one at a time, in order: sink.write is called for
  // a chunk once the previous write's promise has settled; close() waits
  // for the writes before it. A sink that throws or rejects errors the
  // stream: that write, every queued one and later ones reject with it.
  const WRITABLE = Symbol("writable");
  const WRITER = Symbol("writer");
  function writableError(st, e) {
    if (st.state === "closed" || st.state === "errored") return;
    st.state = "errored";
    st.error = e;
    for (const item of st.queue.splice(0)) item.d.reject(e);
    if (st.writer) st.writer.closed.reject(e);
  }
  function writableAdvance(st) {
    if (!st.started || st.busy || st.state === "errored" || st.queue.length === 0) return;
    const item = st.queue[0];
    st.busy = true;
    let r;
    try {
      if (item.close) r = typeof st.sink.close === "function" ? st.sink.close.call(st.sink) : undefined;
      else r = typeof st.sink.write === "function" ? st.sink.write.call(st.sink, item.chunk, st.controller) : undefined;
    } catch (e) {
      r = Promise.reject(e);
    }
    Promise.resolve(r).then(
      () => {
        st.busy = false;
        if (st.state === "errored") return;
        st.queue.shift();
        item.d.resolve();
        if (item.close) {
          st.state = "closed";
          if (st.writer) st.writer.closed.resolve();
        }
        writableAdvance(st);
      },
      (e) => {
        st.busy = false;
        st.queue.shift();
        item.d.reject(e);
        writableError(st, e);
      },
    );
  }
  function writableWrite(st, chunk) {
    if (st.state === "errored") return Promise.reject(st.error);
    if (st.state !== "writable") return Promise.reject(new TypeError("WritableStream: the stream is closing or closed"));
    const d = deferred();
    st.queue.push({ chunk, d });
    writableAdvance(st);
    return d.promise;
  }
  function writableClose(st) {
    if (st.state === "errored") return Promise.reject(st.error);
    if (st.state !== "writable") return Promise.reject(new TypeError("WritableStream: the stream is already closing or closed"));
    st.state = "closing";
    const d = deferred();
    st.queue.push({ close: true, d });
    writableAdvance(st);
    return d.promise;
  }
  function writableAbort(st, reason) {
    if (st.state === "closed" || st.state === "errored") return Promise.resolve();
    abortSignal(st.controller.signal, reason);
    writableError(st, reason === undefined ? domError("The stream was aborted", "AbortError") : reason);
    try {
      return Promise.resolve(typeof st.sink.abort === "function" ? st.sink.abort.call(st.sink, reason) : undefined).then(() => undefined);
    } catch (e) {
      return Promise.reject(e);
    }
  }
  class WritableStreamDefaultController {
    constructor(key, st) {
      if (key !== WRITABLE) throw new TypeError("Illegal constructor");
      define(this, { [WRITABLE]: st, signal: new AbortController().signal });
    }
    error(e) {
      writableError(this[WRITABLE], e);
    }
  }
  tag(WritableStreamDefaultController, "WritableStreamDefaultController");
  class WritableStream {
    constructor(sink, strategy) {
      sink = sink == null ? {} : sink;
      const hwm = strategy && strategy.highWaterMark !== undefined ? Number(strategy.highWaterMark) : 1;
      if (!(hwm >= 0)) throw new RangeError("WritableStream: highWaterMark must be a non-negative number");
      const st = { state: "writable", queue: [], busy: false, started: false, sink, highWaterMark: hwm, writer: null, error: undefined };
      st.controller = new WritableStreamDefaultController(WRITABLE, st);
      this[WRITABLE] = st;
      let r;
      if (typeof sink.start === "function") r = sink.start.call(sink, st.controller);
      Promise.resolve(r).then(
        () => {
          st.started = true;
          writableAdvance(st);
        },
        (e) => writableError(st, e),
      );
    }
    get locked() {
      return this[WRITABLE].writer !== null;
    }
    getWriter() {
      return new WritableStreamDefaultWriter(this);
    }
    close() {
      if (this.locked) return Promise.reject(new TypeError("WritableStream: cannot close a locked stream"));
      return writableClose(this[WRITABLE]);
    }
    abort(reason) {
      if (this.locked) return Promise.reject(new TypeError("WritableStream: cannot abort a locked stream"));
      return writableAbort(this[WRITABLE], reason);
    }
  }
  tag(WritableStream, "WritableStream");
  // writerStream returns the stream while writer w holds its lock.
  function writerStream(w) {
    const st = w[WRITER];
    if (!st || st.writer !== w[WRITABLE]) throw new TypeError("WritableStreamDefaultWriter: the writer was released");
    return st;
  }
  class WritableStreamDefaultWriter {
    constructor(stream) {
      if (!(stream instanceof WritableStream)) throw new TypeError("WritableStreamDefaultWriter: argument is not a WritableStream");
      const st = stream[WRITABLE];
      if (st.writer) throw new TypeError("WritableStream: the stream is locked to another writer");
      st.writer = { closed: deferred() };
      if (st.state === "closed") st.writer.closed.resolve();
      if (st.state === "errored") st.writer.closed.reject(st.error);
      this[WRITER] = st;
      this[WRITABLE] = st.writer;
    }
    get closed() {
      return this[WRITABLE].closed.promise;
    }
    get desiredSize() {
      const st = writerStream(this);
      if (st.state === "errored") return null;
      if (st.state !== "writable") return 0;
      return st.highWaterMark - st.queue.length;
    }
    get ready() {
      const st = this[WRITER];
      if (st && st.state === "errored") return Promise.reject(st.error);
      return Promise.resolve();
    }
    write(chunk) {
      try {
        return writableWrite(writerStream(this), chunk);
      } catch (e) {
        return Promise.reject(e);
      }
    }
    close() {
      try {
        return writableClose(writerStream(this));
      } catch (e) {
        return Promise.reject(e);
      }
    }
    abort(reason) {
      try {
        return writableAbort(writerStream(this), reason);
      } catch (e) {
        return Promise.reject(e);
      }
    }
    releaseLock() {
      const st = this[WRITER];
      if (!st || st.writer !== this[WRITABLE]) return;
      st.writer.closed.reject(new TypeError("WritableStreamDefaultWriter: the writer was released"));
      st.writer = null;
      this[WRITER] = null;
    }
  }
  tag(WritableStreamDefaultWriter, "WritableStreamDefaultWriter");

  // nativeStream is a byte stream whose chunks come from Go: read() returns
  // a promise of a Uint8Array, or null at the end; cancel() stops the source.
  // highWaterMark 0: Go reads only while user code waits for a chunk.
  function nativeStream(read, cancel) {
    return new ReadableStream(
      {
        pull: (c) =>
          read().then((chunk) => {
            if (chunk === null) c.close();
            else c.enqueue(chunk);
          }),
        cancel: () => cancel(),
      },
      { highWaterMark: 0 },
    );
  }

  // concatBytes joins Uint8Arrays.
  function concatBytes(chunks) {
    if (chunks.length === 1) return chunks[0];
    let n = 0;
    for (const c of chunks) n += c.byteLength;
    const out = new Uint8Array(n);
    let off = 0;
    for (const c of chunks) {
      out.set(c, off);
      off += c.byteLength;
    }
    return out;
  }

  // streamBytes reads a ReadableStream of byte chunks to its end, at most
  // limit bytes (a RangeError past it).
  async function streamBytes(stream, limit) {
    const reader = stream.getReader();
    const chunks = [];
    let n = 0;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      const b = toBytes(value, "ReadableStream chunk");
      n += b.byteLength;
      if (n > limit) {
        reader.cancel().catch(() => {});
        throw new RangeError("body is larger than the limit of " + limit + " bytes");
      }
      chunks.push(b);
    }
    return concatBytes(chunks);
  }

  // toBytes views an ArrayBuffer or ArrayBuffer view as a Uint8Array.
  function toBytes(v, what) {
    if (v instanceof Uint8Array) return v;
    if (v instanceof ArrayBuffer) return new Uint8Array(v);
    if (ArrayBuffer.isView(v)) return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
    throw new TypeError(what + " must be an ArrayBuffer, a typed array or a DataView");
  }

  // ---- TextEncoder, TextDecoder, atob, btoa ----
  const utf8Labels = ["utf-8", "utf8", "unicode-1-1-utf-8", "unicode11utf8", "unicode20utf8", "x-unicode20utf8"];
  const DECODER = Symbol("decoder");
  class TextEncoder {
    get encoding() {
      return "utf-8";
    }
    encode(input = "") {
      return native.utf8Encode(String(input));
    }
    encodeInto(source, destination) {
      if (!(destination instanceof Uint8Array)) throw new TypeError("TextEncoder.encodeInto: destination must be a Uint8Array");
      return native.utf8EncodeInto(String(source), destination);
    }
  }
  tag(TextEncoder, "TextEncoder");
  class TextDecoder {
    constructor(label = "utf-8", options) {
      const l = String(label).replace(/^[\t\n\f\r ]+|[\t\n\f\r ]+$/g, "").toLowerCase();
      if (!utf8Labels.includes(l)) throw new RangeError('TextDecoder: encoding "' + label + '" is not supported (only UTF-8 is)');
      const fatal = !!(options && options.fatal);
      const ignoreBOM = !!(options && options.ignoreBOM);
      define(this, { [DECODER]: { fatal, ignoreBOM, decode: native.utf8Decoder(fatal, ignoreBOM) } });
    }
    get encoding() {
      return "utf-8";
    }
    get fatal() {
      return this[DECODER].fatal;
    }
    get ignoreBOM() {
      return this[DECODER].ignoreBOM;
    }
    decode(input, options) {
      return this[DECODER].decode(input, !!(options && options.stream));
    }
  }
  tag(TextDecoder, "TextDecoder");
  function atob(data) {
    if (arguments.length === 0) throw new TypeError("atob: 1 argument required");
    const r = native.atob(String(data));
    if (r === null) throw domError("atob: the string to be decoded is not correctly encoded base64", "InvalidCharacterError");
    return r;
  }
  function btoa(data) {
    if (arguments.length === 0) throw new TypeError("btoa: 1 argument required");
    const r = native.btoa(String(data));
    if (r === null) throw domError("btoa: the string contains characters outside of the Latin1 range", "InvalidCharacterError");
    return r;
  }

  // ---- structuredClone, queueMicrotask ----
  const errorTypes = { Error, EvalError, RangeError, ReferenceError, SyntaxError, TypeError, URIError };
  function structuredClone(value, options) {
    if (arguments.length === 0) throw new TypeError("structuredClone: 1 argument required");
    const memory = new Map();
    const fail = (what) => domError(what + " could not be cloned.", "DataCloneError");
    const clone = (v) => {
      const t = typeof v;
      if (t === "symbol") throw fail(String(v));
      if (t === "function") throw fail(v.name ? "function " + v.name : "a function");
      if (t !== "object" || v === null) return v;
      if (memory.has(v)) return memory.get(v);
      let out;
      const proto = Object.getPrototypeOf(v);
      if (Array.isArray(v)) out = new Array(v.length);
      else if (v instanceof Date) out = new Date(v.getTime());
      else if (v instanceof RegExp) out = new RegExp(v.source, v.flags);
      else if (v instanceof ArrayBuffer) out = v.slice(0);
      else if (ArrayBuffer.isView(v)) {
        const buf = clone(v.buffer);
        out = v instanceof DataView ? new DataView(buf, v.byteOffset, v.byteLength) : new v.constructor(buf, v.byteOffset, v.length);
      } else if (v instanceof Map) out = new Map();
      else if (v instanceof Set) out = new Set();
      else if (v instanceof Boolean || v instanceof Number || v instanceof String) out = Object(v.valueOf());
      else if (v instanceof Error) {
        const E = errorTypes[v.name] || Error;
        out = new E(v.message);
        if (v.stack !== undefined) Object.defineProperty(out, "stack", { value: String(v.stack), writable: true, configurable: true });
        memory.set(v, out);
        if ("cause" in v) out.cause = clone(v.cause);
        return out;
      } else if (v instanceof Promise || v instanceof WeakMap || v instanceof WeakSet || (proto !== Object.prototype && proto !== null && isPlatformObject(v))) {
        throw fail(Object.prototype.toString.call(v));
      } else out = {};
      memory.set(v, out);
      if (v instanceof Map) for (const [k, x] of v) out.set(clone(k), clone(x));
      else if (v instanceof Set) for (const x of v) out.add(clone(x));
      else if (!ArrayBuffer.isView(v) && !(v instanceof ArrayBuffer)) for (const k of Object.keys(v)) out[k] = clone(v[k]);
      return out;
    };
    return clone(value);
  }
  // platformClasses are the platform's objects structuredClone refuses.
  const platformClasses = [];
  const isPlatformObject = (v) => platformClasses.some((C) => v instanceof C);
  function queueMicrotask(callback) {
    if (typeof callback !== "function") throw new TypeError("queueMicrotask: callback is not a function");
    Promise.resolve().then(() => {
      try {
        callback();
      } catch (e) {
        reportError(e);
      }
    });
  }

  // ---- crypto, performance ----
  const KEY = Symbol("key");
  const hashName = (h) => {
    const n = String(typeof h === "object" && h !== null ? h.name : h).toUpperCase();
    return n === "SHA1" ? "SHA-1" : n.replace(/^SHA(\d)/, "SHA-$1");
  };
  class CryptoKey {
    constructor(key) {
      if (key !== KEY) throw new TypeError("Illegal constructor: use crypto.subtle.importKey");
    }
  }
  tag(CryptoKey, "CryptoKey");
  const hmacKey = (key, usage) => {
    if (!(key instanceof CryptoKey) || !key[KEY]) throw new TypeError("crypto.subtle: key must be a CryptoKey from importKey");
    if (!key.usages.includes(usage)) throw domError("crypto.subtle: the key does not allow " + usage, "InvalidAccessError");
    return key[KEY];
  };
  const algName = (a) => String(typeof a === "object" && a !== null ? a.name : a).toUpperCase();
  // later runs fn after the current job, so results come as promises the
  // way Web Crypto gives them (errors as rejections).
  const later = (fn) => new Promise((resolve) => resolve(fn()));
  const subtle = {
    digest: (algorithm, data) => later(() => native.digest(hashName(algorithm), data)),
    importKey: (format, keyData, algorithm, extractable, usages) =>
      later(() => {
        if (format !== "raw") throw domError('crypto.subtle.importKey: only the "raw" format is supported', "NotSupportedError");
        if (algName(algorithm) !== "HMAC") throw domError("crypto.subtle.importKey: only HMAC keys are supported", "NotSupportedError");
        const hash = hashName(algorithm.hash);
        native.digest(hash, new Uint8Array(0)); // validates the hash's name
        const bytes = new Uint8Array(toBytes(keyData, "crypto.subtle.importKey: keyData"));
        const key = new CryptoKey(KEY);
        define(key, { [KEY]: { hash, bytes } });
        Object.defineProperties(key, {
          type: { value: "secret", enumerable: true },
          extractable: { value: !!extractable, enumerable: true },
          algorithm: { value: { name: "HMAC", hash: { name: hash }, length: bytes.length * 8 }, enumerable: true },
          usages: { value: Array.from(usages || []), enumerable: true },
        });
        return key;
      }),
    exportKey: (format, key) =>
      later(() => {
        if (format !== "raw" || !key.extractable) throw domError("crypto.subtle.exportKey: only extractable keys in the raw format", "InvalidAccessError");
        return key[KEY].bytes.slice().buffer;
      }),
    sign: (algorithm, key, data) =>
      later(() => {
        if (algName(algorithm) !== "HMAC") throw domError("crypto.subtle.sign: only HMAC is supported", "NotSupportedError");
        const k = hmacKey(key, "sign");
        return native.hmac(k.hash, k.bytes, data);
      }),
    verify: (algorithm, key, signature, data) =>
      later(() => {
        if (algName(algorithm) !== "HMAC") throw domError("crypto.subtle.verify: only HMAC is supported", "NotSupportedError");
        const k = hmacKey(key, "verify");
        return native.hmacVerify(k.hash, k.bytes, signature, data);
      }),
  };
  const integerArrays = [Int8Array, Uint8Array, Uint8ClampedArray, Int16Array, Uint16Array, Int32Array, Uint32Array];
  const crypto = {
    subtle,
    getRandomValues(array) {
      if (!integerArrays.some((C) => array instanceof C)) throw domError("crypto.getRandomValues: argument must be an integer typed array", "TypeMismatchError");
      if (array.byteLength > 65536) throw domError("crypto.getRandomValues: at most 65536 bytes at a time (got " + array.byteLength + ")", "QuotaExceededError");
      if (native.randomFill) native.randomFill(array);
      else {
        // Workflow VMs: Math.random is the run's seeded generator.
        const b = new Uint8Array(array.buffer, array.byteOffset, array.byteLength);
        for (let i = 0; i < b.length; i++) b[i] = Math.floor(Math.random() * 256);
      }
      return array;
    },
    randomUUID: native.randomUUID,
  };
  const performance = {
    now: native.now || (() => {
      throw new Error("performance.now cannot be used in workflow code (it is replayed and must be deterministic): use Date.now(), or move it into a step");
    }),
    timeOrigin: native.timeOrigin || 0,
  };

  define(g, {
    DOMException, Event, EventTarget, AbortController, AbortSignal,
    ReadableStream, ReadableStreamDefaultReader, ReadableStreamDefaultController, reportError,
    WritableStream, WritableStreamDefaultWriter, WritableStreamDefaultController,
    TextEncoder, TextDecoder, atob, btoa, structuredClone, queueMicrotask, CryptoKey, crypto, performance,
  });
  platformClasses.push(EventTarget, ReadableStream, ReadableStreamDefaultReader, WritableStream, WritableStreamDefaultWriter, CryptoKey);
  return { nativeStream, streamBytes, concatBytes, toBytes, domError, deferred, define, tag, abortSignal, platformClasses, errorStream: (s, e) => errorStream(s[STREAM], e) };
});
