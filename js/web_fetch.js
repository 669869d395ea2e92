// The web platform's URL and fetch classes (DESIGN §9), compiled once and
// evaluated after web.js: URL and URLSearchParams (parsed in Go by the
// WHATWG URL standard), Headers, Blob, File, FormData, Request, Response
// and, in VMs that may do I/O, fetch. Called with the Go natives and the
// internals web.js returned.
(function (native, web) {
  "use strict";
  const g = globalThis;
  const { define, tag, domError, toBytes, concatBytes, streamBytes, abortSignal } = web;
  const encoder = new TextEncoder();
  const utf8 = (s) => encoder.encode(s);
  const decodeUTF8 = (b) => new TextDecoder().decode(b);
  const iter = (list) => list[Symbol.iterator]();

  // ---- URLSearchParams, URL ----
  const LIST = Symbol("list");
  const OWNER = Symbol("owner");
  class URLSearchParams {
    constructor(init = "") {
      let list = [];
      if (init instanceof URLSearchParams) list = init[LIST].map((p) => p.slice());
      else if (typeof init === "object" && init !== null) {
        if (typeof init[Symbol.iterator] === "function") {
          for (const pair of init) {
            const p = Array.from(pair);
            if (p.length !== 2) throw new TypeError("URLSearchParams: each pair must have exactly two items");
            list.push([String(p[0]), String(p[1])]);
          }
        } else for (const k of Object.keys(init)) list.push([k, String(init[k])]);
      } else {
        const s = String(init);
        list = native.formParse(s.startsWith("?") ? s.slice(1) : s);
      }
      define(this, { [LIST]: list, [OWNER]: null });
    }
    get size() {
      return this[LIST].length;
    }
    append(name, value) {
      this[LIST].push([String(name), String(value)]);
      updateOwner(this);
    }
    delete(name, value) {
      name = String(name);
      this[LIST] = this[LIST].filter((p) => p[0] !== name || (value !== undefined && p[1] !== String(value)));
      updateOwner(this);
    }
    get(name) {
      const p = this[LIST].find((p) => p[0] === String(name));
      return p ? p[1] : null;
    }
    getAll(name) {
      return this[LIST].filter((p) => p[0] === String(name)).map((p) => p[1]);
    }
    has(name, value) {
      return this[LIST].some((p) => p[0] === String(name) && (value === undefined || p[1] === String(value)));
    }
    set(name, value) {
      name = String(name);
      const i = this[LIST].findIndex((p) => p[0] === name);
      if (i < 0) this[LIST].push([name, String(value)]);
      else {
        this[LIST][i][1] = String(value);
        this[LIST] = this[LIST].filter((p, j) => j <= i || p[0] !== name);
      }
      updateOwner(this);
    }
    sort() {
      // Stable, by UTF-16 code units.
      this[LIST] = this[LIST].map((p, i) => [p, i]).sort((a, b) => (a[0][0] < b[0][0] ? -1 : a[0][0] > b[0][0] ? 1 : a[1] - b[1])).map((x) => x[0]);
      updateOwner(this);
    }
    forEach(fn, thisArg) {
      for (const [k, v] of this[LIST]) fn.call(thisArg, v, k, this);
    }
    keys() {
      return iter(this[LIST].map((p) => p[0]));
    }
    values() {
      return iter(this[LIST].map((p) => p[1]));
    }
    entries() {
      return iter(this[LIST].map((p) => [p[0], p[1]]));
    }
    [Symbol.iterator]() {
      return this.entries();
    }
    toString() {
      return native.formSerialize(this[LIST]);
    }
  }
  tag(URLSearchParams, "URLSearchParams");
  // updateOwner writes the params back into the query of their URL.
  function updateOwner(params) {
    const u = params[OWNER];
    if (!u) return;
    const q = params.toString();
    setRecord(u, native.urlSet(u[URLREC].href, "query", q), false);
  }

  const URLREC = Symbol("url");
  // setRecord gives u the components the Go parser returned; refresh
  // re-reads its searchParams from the query.
  function setRecord(u, rec, refresh = true) {
    u[URLREC] = rec;
    if (refresh && u[PARAMS]) u[PARAMS][LIST] = native.formParse(rec.search.slice(1));
  }
  const PARAMS = Symbol("params");
  class URL {
    constructor(url, base) {
      if (arguments.length === 0) throw new TypeError("URL: 1 argument required");
      const rec = native.urlParse(String(url), base === undefined ? undefined : String(base));
      if (rec === null) throw new TypeError("Invalid URL: " + String(url) + (base === undefined ? "" : " (base " + String(base) + ")"));
      define(this, { [URLREC]: rec, [PARAMS]: null });
    }
    static canParse(url, base) {
      return native.urlParse(String(url), base === undefined ? undefined : String(base)) !== null;
    }
    static parse(url, base) {
      try {
        return new URL(url, base);
      } catch (_) {
        return null;
      }
    }
    get searchParams() {
      if (!this[PARAMS]) {
        const p = new URLSearchParams(this[URLREC].search);
        p[OWNER] = this;
        this[PARAMS] = p;
      }
      return this[PARAMS];
    }
    get origin() {
      return this[URLREC].origin;
    }
    toString() {
      return this[URLREC].href;
    }
    toJSON() {
      return this[URLREC].href;
    }
  }
  for (const k of ["href", "protocol", "username", "password", "host", "hostname", "port", "pathname", "search", "hash"]) {
    Object.defineProperty(URL.prototype, k, {
      get() {
        return this[URLREC][k];
      },
      set(v) {
        if (k === "href") {
          const rec = native.urlParse(String(v), undefined);
          if (rec === null) throw new TypeError("Invalid URL: " + String(v));
          setRecord(this, rec);
          return;
        }
        const rec = native.urlSet(this[URLREC].href, k, String(v));
        if (rec !== null) setRecord(this, rec);
      },
      enumerable: true,
      configurable: true,
    });
  }
  tag(URL, "URL");

  // ---- Headers ----
  const HEADERS = Symbol("headers");
  const token = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
  const normalizeValue = (v) => String(v).replace(/^[\t\n\r ]+|[\t\n\r ]+$/g, "");
  function checkHeader(name, value) {
    if (!token.test(name)) throw new TypeError('Headers: invalid header name "' + name + '"');
    if (/[\0\r\n]/.test(value)) throw new TypeError('Headers: invalid value for header "' + name + '"');
  }
  class Headers {
    constructor(init) {
      define(this, { [HEADERS]: { list: [], immutable: false } });
      if (init == null) return;
      if (init instanceof Headers) {
        for (const [k, v] of init[HEADERS].list) this.append(k, v);
      } else if (typeof init === "object" && typeof init[Symbol.iterator] === "function") {
        for (const pair of init) {
          const p = Array.from(pair);
          if (p.length !== 2) throw new TypeError("Headers: each header must be a [name, value] pair");
          this.append(p[0], p[1]);
        }
      } else if (typeof init === "object") {
        for (const k of Object.keys(init)) this.append(k, init[k]);
      } else throw new TypeError("Headers: init must be an object, an iterable of pairs or a Headers");
    }
    append(name, value) {
      const h = this[HEADERS];
      name = String(name);
      value = normalizeValue(value);
      checkHeader(name, value);
      if (h.immutable) throw new TypeError("Headers: these headers are immutable");
      h.list.push([name.toLowerCase(), value]);
    }
    delete(name) {
      const h = this[HEADERS];
      if (h.immutable) throw new TypeError("Headers: these headers are immutable");
      const n = String(name).toLowerCase();
      h.list = h.list.filter((p) => p[0] !== n);
    }
    get(name) {
      const n = String(name).toLowerCase();
      const vs = this[HEADERS].list.filter((p) => p[0] === n).map((p) => p[1]);
      return vs.length === 0 ? null : vs.join(", ");
    }
    getSetCookie() {
      return this[HEADERS].list.filter((p) => p[0] === "set-cookie").map((p) => p[1]);
    }
    has(name) {
      const n = String(name).toLowerCase();
      return this[HEADERS].list.some((p) => p[0] === n);
    }
    set(name, value) {
      const h = this[HEADERS];
      name = String(name);
      value = normalizeValue(value);
      checkHeader(name, value);
      if (h.immutable) throw new TypeError("Headers: these headers are immutable");
      const n = name.toLowerCase();
      const i = h.list.findIndex((p) => p[0] === n);
      if (i < 0) h.list.push([n, value]);
      else {
        h.list[i] = [n, value];
        h.list = h.list.filter((p, j) => j <= i || p[0] !== n);
      }
    }
    forEach(fn, thisArg) {
      for (const [k, v] of this.entries()) fn.call(thisArg, v, k, this);
    }
    // entries are sorted by name and combined, set-cookie kept apart (Fetch §5.2).
    entries() {
      const names = Array.from(new Set(this[HEADERS].list.map((p) => p[0]))).sort();
      const out = [];
      for (const n of names) {
        if (n === "set-cookie") for (const v of this.getSetCookie()) out.push([n, v]);
        else out.push([n, this.get(n)]);
      }
      return iter(out);
    }
    keys() {
      return iter(Array.from(this.entries(), (p) => p[0]));
    }
    values() {
      return iter(Array.from(this.entries(), (p) => p[1]));
    }
    [Symbol.iterator]() {
      return this.entries();
    }
  }
  tag(Headers, "Headers");

  // ---- Blob, File, FormData ----
  const BLOB = Symbol("blob");
  class Blob {
    constructor(parts = [], options) {
      const chunks = [];
      for (const p of parts) {
        if (p instanceof Blob) chunks.push(p[BLOB]);
        else if (p instanceof ArrayBuffer || ArrayBuffer.isView(p)) chunks.push(new Uint8Array(toBytes(p)));
        else chunks.push(utf8(String(p)));
      }
      const type = options && options.type !== undefined ? String(options.type) : "";
      define(this, { [BLOB]: concatBytes(chunks.length ? chunks : [new Uint8Array(0)]) });
      Object.defineProperty(this, "type", { value: /^[\x20-\x7E]*$/.test(type) ? type.toLowerCase() : "", enumerable: true });
    }
    get size() {
      return this[BLOB].byteLength;
    }
    slice(start, end, type) {
      const b = new Blob([], { type: type === undefined ? "" : type });
      b[BLOB] = this[BLOB].slice(start, end);
      return b;
    }
    text() {
      return Promise.resolve(decodeUTF8(this[BLOB]));
    }
    arrayBuffer() {
      return Promise.resolve(this[BLOB].slice().buffer);
    }
    bytes() {
      return Promise.resolve(this[BLOB].slice());
    }
    stream() {
      const b = this[BLOB];
      return new ReadableStream({
        start(c) {
          if (b.byteLength) c.enqueue(b.slice());
          c.close();
        },
      });
    }
  }
  tag(Blob, "Blob");
  class File extends Blob {
    constructor(parts, name, options) {
      if (arguments.length < 2) throw new TypeError("File: 2 arguments required");
      super(parts, options);
      Object.defineProperty(this, "name", { value: String(name), enumerable: true });
      Object.defineProperty(this, "lastModified", { value: options && options.lastModified !== undefined ? Number(options.lastModified) : Date.now(), enumerable: true });
    }
  }
  tag(File, "File");
  const ENTRIES = Symbol("entries");
  const formValue = (value, filename) => {
    if (!(value instanceof Blob)) return String(value);
    if (value instanceof File && filename === undefined) return value;
    return new File([value], filename === undefined ? "blob" : String(filename), { type: value.type });
  };
  class FormData {
    constructor(form) {
      if (form !== undefined) throw new TypeError("FormData: there are no forms here; use new FormData() and append");
      define(this, { [ENTRIES]: [] });
    }
    append(name, value, filename) {
      this[ENTRIES].push([String(name), formValue(value, filename)]);
    }
    set(name, value, filename) {
      name = String(name);
      const e = this[ENTRIES];
      const i = e.findIndex((p) => p[0] === name);
      if (i < 0) e.push([name, formValue(value, filename)]);
      else {
        e[i] = [name, formValue(value, filename)];
        this[ENTRIES] = e.filter((p, j) => j <= i || p[0] !== name);
      }
    }
    delete(name) {
      this[ENTRIES] = this[ENTRIES].filter((p) => p[0] !== String(name));
    }
    get(name) {
      const p = this[ENTRIES].find((p) => p[0] === String(name));
      return p ? p[1] : null;
    }
    getAll(name) {
      return this[ENTRIES].filter((p) => p[0] === String(name)).map((p) => p[1]);
    }
    has(name) {
      return this[ENTRIES].some((p) => p[0] === String(name));
    }
    forEach(fn, thisArg) {
      for (const [k, v] of this[ENTRIES]) fn.call(thisArg, v, k, this);
    }
    entries() {
      return iter(this[ENTRIES].map((p) => [p[0], p[1]]));
    }
    keys() {
      return iter(this[ENTRIES].map((p) => p[0]));
    }
    values() {
      return iter(this[ENTRIES].map((p) => p[1]));
    }
    [Symbol.iterator]() {
      return this.entries();
    }
  }
  tag(FormData, "FormData");
  // multipart encodes form data as multipart/form-data (RFC 7578).
  function multipart(form) {
    const boundary = "----svcFormBoundary" + Array.from(crypto.getRandomValues(new Uint8Array(12)), (b) => b.toString(16).padStart(2, "0")).join("");
    const esc = (s) => s.replace(/\r\n|\r|\n/g, "\r\n").replace(/\n/g, "%0A").replace(/\r/g, "%0D").replace(/"/g, "%22");
    const parts = [];
    for (const [name, value] of form[ENTRIES]) {
      let head = "--" + boundary + '\r\nContent-Disposition: form-data; name="' + esc(name) + '"';
      if (typeof value === "string") {
        parts.push(utf8(head + "\r\n\r\n" + value.replace(/\r\n|\r|\n/g, "\r\n") + "\r\n"));
      } else {
        head += '; filename="' + esc(value.name) + '"\r\nContent-Type: ' + (value.type || "application/octet-stream") + "\r\n\r\n";
        parts.push(utf8(head), value[BLOB], utf8("\r\n"));
      }
    }
    parts.push(utf8("--" + boundary + "--\r\n"));
    return { bytes: concatBytes(parts), type: "multipart/form-data; boundary=" + boundary };
  }

  // ---- Body, Request, Response ----
  const BODY = Symbol("body");
  // extractBody turns a BodyInit into {bytes} or {stream} and its default
  // Content-Type (Fetch §5.2 "extract a body").
  function extractBody(init) {
    if (init == null) return { body: null, type: null };
    if (typeof init === "string") return { body: { bytes: utf8(init) }, type: "text/plain;charset=UTF-8" };
    if (init instanceof URLSearchParams) return { body: { bytes: utf8(init.toString()) }, type: "application/x-www-form-urlencoded;charset=UTF-8" };
    if (init instanceof FormData) {
      const m = multipart(init);
      return { body: { bytes: m.bytes }, type: m.type };
    }
    if (init instanceof Blob) return { body: { bytes: init[BLOB] }, type: init.type || null };
    if (init instanceof ArrayBuffer || ArrayBuffer.isView(init)) return { body: { bytes: new Uint8Array(toBytes(init)) }, type: null };
    if (init instanceof ReadableStream) return { body: { stream: init }, type: null };
    return { body: { bytes: utf8(String(init)) }, type: "text/plain;charset=UTF-8" };
  }
  // bodyStream returns the body's stream, making one for known bytes.
  function bodyStream(b) {
    if (!b.stream) {
      const bytes = b.bytes;
      b.stream = new ReadableStream({
        start(c) {
          if (bytes.byteLength) c.enqueue(bytes);
          c.close();
        },
      });
    }
    return b.stream;
  }
  // consume reads the whole body once (bounded by fetchBodyLimit).
  function consume(r) {
    const b = r[BODY];
    if (b === null) return Promise.resolve(new Uint8Array(0));
    if (b.used || (b.stream && b.stream.locked)) return Promise.reject(new TypeError("Body is unusable: it has already been read"));
    b.used = true;
    if (!b.stream) return Promise.resolve(b.bytes);
    return streamBytes(b.stream, native.bodyLimit);
  }
  class Body {
    get body() {
      return this[BODY] === null ? null : bodyStream(this[BODY]);
    }
    get bodyUsed() {
      const b = this[BODY];
      return b !== null && (b.used || (b.stream !== undefined && b.stream.locked));
    }
    arrayBuffer() {
      return consume(this).then((b) => (b.byteOffset === 0 && b.byteLength === b.buffer.byteLength ? b.buffer : b.slice().buffer));
    }
    bytes() {
      return consume(this);
    }
    text() {
      return consume(this).then(decodeUTF8);
    }
    json() {
      return this.text().then(JSON.parse);
    }
    blob() {
      return consume(this).then((b) => new Blob([b], { type: this.headers.get("content-type") || "" }));
    }
    formData() {
      const type = this.headers.get("content-type") || "";
      if (!/^application\/x-www-form-urlencoded/i.test(type)) return Promise.reject(new TypeError("Body.formData: only application/x-www-form-urlencoded bodies can be parsed"));
      return this.text().then((t) => {
        const f = new FormData();
        for (const [k, v] of new URLSearchParams(t)) f.append(k, v);
        return f;
      });
    }
  }
  // cloneBody tees a body: r keeps one branch, the clone gets the other.
  function cloneBody(b) {
    if (b === null) return null;
    if (b.used || (b.stream && b.stream.locked)) throw new TypeError("Body is unusable: it has already been read");
    if (!b.stream) return { bytes: b.bytes };
    const [x, y] = b.stream.tee();
    b.stream = x;
    return { stream: y };
  }

  const REQ = Symbol("request");
  const methods = ["DELETE", "GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH"];
  class Request extends Body {
    constructor(input, init = {}) {
      super();
      let base;
      if (input instanceof Request) base = input;
      const url = base ? base.url : new URL(String(input)).href;
      let method = init.method !== undefined ? String(init.method) : base ? base.method : "GET";
      if (!token.test(method)) throw new TypeError('Request: invalid method "' + method + '"');
      if (methods.includes(method.toUpperCase())) method = method.toUpperCase();
      const headers = new Headers(init.headers !== undefined ? init.headers : base ? base.headers : undefined);
      let body = null;
      if (init.body != null) {
        if (method === "GET" || method === "HEAD") throw new TypeError("Request: a " + method + " request cannot have a body");
        const x = extractBody(init.body);
        body = x.body;
        if (x.type && !headers.has("content-type")) headers.set("content-type", x.type);
      } else if (base && init.body === undefined) body = cloneBody(base[BODY]);
      const redirect = init.redirect !== undefined ? String(init.redirect) : base ? base.redirect : "follow";
      if (!["follow", "manual", "error"].includes(redirect)) throw new TypeError('Request: redirect must be "follow", "manual" or "error"');
      const signal = init.signal !== undefined ? init.signal : base ? base.signal : null;
      if (signal != null && !(signal instanceof AbortSignal)) throw new TypeError("Request: signal must be an AbortSignal");
      define(this, { [BODY]: body, [REQ]: { url, method, headers, redirect, signal: signal || new AbortController().signal } });
    }
    get url() {
      return this[REQ].url;
    }
    get method() {
      return this[REQ].method;
    }
    get headers() {
      return this[REQ].headers;
    }
    get redirect() {
      return this[REQ].redirect;
    }
    get signal() {
      return this[REQ].signal;
    }
    get cache() {
      return "default";
    }
    get credentials() {
      return "same-origin";
    }
    get mode() {
      return "cors";
    }
    clone() {
      const r = new Request(this);
      return r;
    }
  }
  tag(Request, "Request");

  const RES = Symbol("response");
  class Response extends Body {
    constructor(body = null, init = {}) {
      super();
      const status = init.status !== undefined ? Number(init.status) : 200;
      if (!(status >= 200 && status <= 599) || status !== Math.floor(status)) throw new RangeError("Response: status must be an integer from 200 to 599");
      const headers = new Headers(init.headers);
      const x = extractBody(body);
      if (x.body && [101, 103, 204, 205, 304].includes(status)) throw new TypeError("Response: a null body status cannot have a body");
      if (x.type && !headers.has("content-type")) headers.set("content-type", x.type);
      define(this, { [BODY]: x.body, [RES]: { status, statusText: init.statusText !== undefined ? String(init.statusText) : "", headers, url: "", redirected: false, type: "default" } });
    }
    get status() {
      return this[RES].status;
    }
    get ok() {
      return this[RES].status >= 200 && this[RES].status <= 299;
    }
    get statusText() {
      return this[RES].statusText;
    }
    get headers() {
      return this[RES].headers;
    }
    get url() {
      return this[RES].url;
    }
    get redirected() {
      return this[RES].redirected;
    }
    get type() {
      return this[RES].type;
    }
    clone() {
      const r = new Response(null, { status: this.status, statusText: this.statusText, headers: this.headers });
      Object.assign(r[RES], { url: this.url, redirected: this.redirected, type: this.type });
      r[BODY] = cloneBody(this[BODY]);
      return r;
    }
    static json(data, init = {}) {
      const headers = new Headers(init.headers);
      if (!headers.has("content-type")) headers.set("content-type", "application/json");
      return new Response(JSON.stringify(data), Object.assign({}, init, { headers }));
    }
    static error() {
      const r = new Response(null, { status: 200 });
      Object.assign(r[RES], { status: 0, type: "error" });
      return r;
    }
    static redirect(url, status = 302) {
      if (![301, 302, 303, 307, 308].includes(status)) throw new RangeError("Response.redirect: invalid redirect status");
      return new Response(null, { status, headers: { location: new URL(url).href } });
    }
  }
  tag(Response, "Response");

  // fetch sends the request through Go; the promise resolves once the
  // headers are in and the body streams. An abort of the signal rejects it
  // (or errors the body) with the signal's reason and cancels the request.
  function fetch(input, init) {
    let req;
    try {
      req = new Request(input, init);
    } catch (e) {
      return Promise.reject(e);
    }
    const signal = req.signal;
    if (signal.aborted) return Promise.reject(signal.reason);
    const scheme = req.url.slice(0, req.url.indexOf(":"));
    if (scheme !== "http" && scheme !== "https") return Promise.reject(new TypeError("fetch: only http: and https: URLs are supported (got " + scheme + ":)"));
    const b = req[BODY];
    const bodyBytes = b === null ? Promise.resolve(null) : consume(req);
    return bodyBytes.then((bytes) => {
      if (signal.aborted) throw signal.reason;
      const headers = Array.from(req.headers[HEADERS].list, (p) => [p[0], p[1]]);
      const [p, abort] = native.fetch(req.method, req.url, headers, bytes, req.redirect);
      let res = null;
      return new Promise((resolve, reject) => {
        const onAbort = () => {
          abort();
          if (res) web.errorStream(res[BODY].stream, signal.reason);
          reject(signal.reason);
        };
        signal.addEventListener("abort", onAbort, { once: true });
        p.then((init) => {
          const r = new Response(null, { status: 200 });
          const h = new Headers(init.headers);
          h[HEADERS].immutable = true;
          Object.assign(r[RES], { status: init.status, statusText: init.statusText, headers: h, url: init.url, redirected: init.redirected, type: "basic" });
          r[BODY] = [101, 204, 205, 304].includes(init.status) || req.method === "HEAD" ? (init.body.cancel(), null) : { stream: init.body };
          res = r;
          resolve(r);
        }, reject);
      });
    });
  }

  define(g, { URL, URLSearchParams, Headers, Blob, File, FormData, Request, Response });
  if (native.fetch) define(g, { fetch });
  web.platformClasses.push(Headers, Request, Response, FormData);
});
