package main

import (
	"encoding/json"
	"os"
	"testing"
)

// TestWebURLWPT runs rows of the web-platform-tests URL data
// (testdata/wpt/README.md) through the parser and reports the pass rate;
// it fails below urlWPTPassRate.
func TestWebURLWPT(t *testing.T) {
	const urlWPTPassRate = 1.0
	b, err := os.ReadFile("testdata/wpt/urltestdata-subset.json")
	if err != nil {
		t.Fatal(err)
	}
	var rows [][3]*string
	if err := json.Unmarshal(b, &rows); err != nil {
		t.Fatal(err)
	}
	pass := 0
	for _, r := range rows {
		u, ok := urlParseString(*r[0], r[1])
		switch {
		case r[2] == nil && !ok, r[2] != nil && ok && u.href() == *r[2]:
			pass++
		case r[2] == nil:
			t.Errorf("new URL(%q, %q) = %q; want failure", *r[0], *r[1], u.href())
		case !ok:
			t.Errorf("new URL(%q, %q) failed; want %q", *r[0], *r[1], *r[2])
		default:
			t.Errorf("new URL(%q, %q) = %q; want %q", *r[0], *r[1], u.href(), *r[2])
		}
	}
	rate := float64(pass) / float64(len(rows))
	t.Logf("WPT urltestdata: %d of %d rows pass (%.1f%%)", pass, len(rows), 100*rate)
	if rate < urlWPTPassRate {
		t.Errorf("pass rate %.3f; want at least %.3f", rate, urlWPTPassRate)
	}
}

func TestWebURL(t *testing.T) {
	webCases(t, []struct{ name, src, want string }{
		{"getters", `const u = new URL("HTTPS://us%65r:p@EXAMPLE.com:8443/a/./b/../c?x=1&y=%20#frag");
			return [u.href, u.origin, u.protocol, u.username, u.password, u.host, u.hostname, u.port, u.pathname, u.search, u.hash];`,
			`["https://us%65r:p@example.com:8443/a/c?x=1&y=%20#frag","https://example.com:8443","https:","us%65r","p","example.com:8443","example.com","8443","/a/c","?x=1&y=%20","#frag"]`},
		{"relative", `return new URL("../d?q", "http://h/a/b/c").href;`, `"http://h/a/d?q"`},
		{"ipv4 forms", `return ["http://0x7f.1/", "http://2130706433/", "http://127.0.0.1./"].map((s) => new URL(s).host);`, `["127.0.0.1","127.0.0.1","127.0.0.1"]`},
		{"ipv6", `return [new URL("http://[::1]:80/").host, new URL("http://[1:0:0:0:0:0:0:1]/").hostname, new URL("http://[::ffff:192.168.0.1]/").hostname];`, `["[::1]","[1::1]","[::ffff:c0a8:1]"]`},
		{"idna", `return [new URL("http://EXAMPLE.bücher/").hostname, new URL("https://xn--nxasmq6b.com/").hostname];`, `["example.xn--bcher-kva","xn--nxasmq6b.com"]`},
		{"file", `return [new URL("file:///C:/x/../y").href, new URL("file://localhost/etc/hosts").href];`, `["file:///C:/y","file:///etc/hosts"]`},
		{"invalid throws TypeError", `try { new URL("http://exa mple.com"); } catch (e) { return [e.name, URL.canParse("nope"), URL.parse("/x", "http://h").href]; }`, `["TypeError",false,"http://h/x"]`},
		{"setters", `const u = new URL("http://h/p?q#f");
			u.pathname = "/a b"; u.search = "x=1"; u.hash = "top"; u.port = "81"; u.hostname = "other"; u.protocol = "https"; u.username = "me";
			return u.href;`, `"https://me@other:81/a%20b?x=1#top"`},
		{"searchParams", `const u = new URL("http://h/?a=1&b=2&a=3");
			const p = u.searchParams; p.append("c", "x y&"); p.delete("b");
			const all = p.getAll("a"); p.set("a", "9");
			return [all, u.search, Object.fromEntries(u.searchParams), [...new URLSearchParams({ k: "v" })]];`,
			`[["1","3"],"?a=9&c=x+y%26",{"a":"9","c":"x y&"},[["k","v"]]]`},
		{"URLSearchParams parse and sort", `const p = new URLSearchParams("?b=%C3%A9&a=+1&a=2&z");
			p.sort(); return [p.toString(), p.get("b"), p.has("z"), p.size];`, `["a=+1&a=2&b=%C3%A9&z=","é",true,4]`},
		{"URL as JSON", `return JSON.stringify({ u: new URL("http://h") });`, `"{\"u\":\"http://h/\"}"`},
	})
}
