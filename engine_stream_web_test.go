package main

import "testing"

// TestWebWritableStream: the WritableStream getWritable() returns follows
// the web standard's order and error rules with any sink.
func TestWebWritableStream(t *testing.T) {
	webCases(t, []struct{ name, src, want string }{
		{"writes reach the sink one at a time, in order, then close", `
			const got = []; let inFlight = 0, overlap = false;
			const s = new WritableStream({
			  async write(c) { if (inFlight++) overlap = true; await null; await null; got.push(c); inFlight--; },
			  close() { got.push("closed"); },
			});
			const w = s.getWriter();
			const ps = [w.write(1), w.write(2), w.write(3)];
			await w.close();
			await Promise.all(ps);
			await w.closed;
			return [got, overlap, s.locked];`, `[[1,2,3,"closed"],false,true]`},
		{"a failing sink rejects that write and every later one", `
			const s = new WritableStream({ write(c) { if (c === 2) throw new RangeError("too big"); } });
			const w = s.getWriter();
			const r = await Promise.allSettled([w.write(1), w.write(2), w.write(3)]);
			let closed; try { await w.closed; } catch (e) { closed = e.message; }
			return [r.map((x) => x.status + (x.reason ? " " + x.reason.name : "")), closed];`,
			`[["fulfilled","rejected RangeError","rejected RangeError"],"too big"]`},
		{"one writer at a time; release unlocks", `
			const s = new WritableStream(); const w = s.getWriter();
			let second; try { s.getWriter(); } catch (e) { second = e.name; }
			w.releaseLock();
			let released; try { await w.write(1); } catch (e) { released = e.name; }
			s.getWriter();
			return [second, released, s.locked];`, `["TypeError","TypeError",true]`},
		{"write after close is refused", `
			const w = new WritableStream().getWriter(); w.close();
			try { await w.write(1); } catch (e) { return e.name; }`, `"TypeError"`},
		{"abort tells the sink and rejects queued writes", `
			let why; const s = new WritableStream({ write() { return new Promise(() => {}); }, abort(r) { why = r; } });
			const w = s.getWriter(); const p = w.write(1);
			await w.abort("stop");
			let queued; try { await p; } catch (e) { queued = e; }
			return [why, queued];`, `["stop","stop"]`},
		{"pipeTo a WritableStream", `
			const got = [];
			await ReadableStream.from(["a", "b"]).pipeTo(new WritableStream({ write(c) { got.push(c); } }));
			return got;`, `["a","b"]`},
	})
}
