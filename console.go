package main

// consoleHTML is the local console page: the project, the boot gate, and a
// form that stores a model-provider credential (which opens a closed gate
// without a restart). Arguments: project dir, gate open, gate reason.
const consoleHTML = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>svc console</title>
<style>body{font:15px system-ui,sans-serif;max-width:40rem;margin:3rem auto;padding:0 1rem}code{background:#eee;padding:0 .3em}label{display:block;margin:.6rem 0}input,select{font:inherit;width:100%%}</style>
</head><body>
<h1>svc</h1>
<p>Project <code>%s</code></p>
<p>Boot gate open: <b id="open">%t</b> (<span id="reason">%s</span>)</p>
<h2>Model provider</h2>
<form id="f">
<label>Provider <select name="provider"><option>openai</option><option>anthropic</option><option value="openai-compatible">OpenAI-compatible server</option></select></label>
<label>API key <input name="apiKey" type="password" autocomplete="off"></label>
<label>Base URL (optional) <input name="baseUrl" placeholder="http://127.0.0.1:11434/v1"></label>
<button>Store credential</button> <span id="msg"></span>
</form>
<script>
document.getElementById("f").onsubmit = async (e) => {
  e.preventDefault();
  const body = Object.fromEntries(new FormData(e.target));
  const r = await fetch("/api/settings/model-provider", {method: "PUT", headers: {"content-type": "application/json"}, body: JSON.stringify(body)});
  const j = await r.json();
  if (!r.ok) { document.getElementById("msg").textContent = j.error.message; return; }
  document.getElementById("open").textContent = j.gate.open;
  document.getElementById("reason").textContent = j.gate.reason;
  document.getElementById("msg").textContent = "stored";
};
</script>
</body></html>
`
