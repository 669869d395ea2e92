package main

import (
	"testing"
)

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
		{"^ in a path is percent-encoded (whatwg/url#846)", `return [new URL("foo://h/a^b").pathname, new URL("http://h/^").href];`, `["/a%5Eb","http://h/%5E"]`},
		{"an opaque path's space before ? or # is %20 (whatwg/url#844)", `
			const a = new URL("data:space  ?query#fragment"); a.search = "";
			const b = new URL("sc:space    #fragment"); b.hash = "";
			return [a.href, b.href, b.pathname, new URL("sc:space ").href];`, `["data:space %20#fragment","sc:space   %20","space   %20","sc:space"]`},
		{"host setter keeps the host before a bad port", `const u = new URL("http://example.net/path"); u.host = "example.com:65536"; return u.href;`, `"http://example.com/path"`},
		{"URL as JSON", `return JSON.stringify({ u: new URL("http://h") });`, `"{\"u\":\"http://h/\"}"`},
	})
}
