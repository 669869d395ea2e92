// The web platform's core classes (DESIGN §9), compiled once and evaluated in
// every VM: DOMException, EventTarget, AbortController/AbortSignal,
// ReadableStream, TextEncoder/TextDecoder, structuredClone, queueMicrotask,
// atob/btoa, crypto and performance. The program evaluates to a function
// that the runtime calls with its Go natives (js_web.go); it defines the
// globals and returns the internals other parts of the platform use
// (web_fetch.js, the Go helpers jsReadableStream and jsStreamBytes).
(function (native) {
  "use strict";
  const g = globalThis;
  // goja has no Symbol.asyncIterator; esbuild's lowered for-await falls back
  // to Symbol.for("Symbol.asyncIterator"), so the platform uses that symbol.
  if (!Symbol.asyncIterator) {
    Object.defineProperty(Symbol, "asyncIterator", { value: Symbol.for("Symbol.asyncIterator") });
  }
  const define = (obj, props) => {
    for (const k of Object.keys(props)) {
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

  define(g, {
    DOMException, Event, EventTarget, AbortController, AbortSignal,
    ReadableStream, ReadableStreamDefaultReader, ReadableStreamDefaultController, reportError,
  });
  return { nativeStream, streamBytes, concatBytes, toBytes, domError, deferred, define, tag, abortSignal };
});
