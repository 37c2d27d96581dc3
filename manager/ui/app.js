// The Fuge manager's dashboard. It loads the lease tables once
// (/ui/api/snapshot), keeps them current from the event stream
// (/v1/events: "log" entries for the event log, "delta" updates for the
// tables), and polls only the cheap things: the raft cluster and the
// owners' last renewals. Positions on the ring are 64-bit hashes, sent as
// 16 hex digits and held as BigInt.
"use strict";

(function () {
  const TWO64 = 18446744073709551616;
  const MAX_ROWS = 500;       // lease-table rows shown per namespace
  const MAX_LOG = 500;        // event-log entries shown
  const POLL_MS = 5000;       // cluster and owners

  const state = {
    epoch: "",
    seq: 0,              // the snapshot's sequence number: deltas after it apply
    loading: false,
    pending: [],         // deltas that arrived while the snapshot loaded
    source: "",
    role: "",
    ns: new Map(),       // name -> namespace view
    drawn: {},           // name -> the arcs last drawn, merged by owner and state (tests read it)
    logCount: 0,
  };

  // ---------- positions and tables ----------

  const big = (hex) => BigInt("0x" + hex);
  const hex = (b) => b.toString(16).padStart(16, "0");
  const frac = (b) => Number(b >> 11n) / 9007199254740992; // 2^53
  const cmp = (a, b) => (a < b ? -1 : a > b ? 1 : 0);

  // contains reports whether (s, e] holds h; s == e is the whole circle.
  function contains(s, e, h) {
    if (s === e) return true;
    if (s < e) return h > s && h <= e;
    return h > s || h <= e;
  }

  // A table partitions the circle like ring.Table: arc i is
  // (ends[i-1], ends[i]], arc 0 wraps.
  function tableFrom(arcs) {
    const ends = [], vals = [];
    for (const a of arcs) {
      ends.push(big(a.end));
      vals.push({ owner: a.owner || "", gen: a.generation || 0, state: a.state || (a.owner ? "granted" : "free") });
    }
    if (ends.length === 0) { ends.push(0n); vals.push({ owner: "", gen: 0, state: "free" }); }
    return { ends, vals };
  }

  function find(t, h) {
    let lo = 0, hi = t.ends.length;
    while (lo < hi) {
      const m = (lo + hi) >> 1;
      if (t.ends[m] < h) lo = m + 1; else hi = m;
    }
    return lo === t.ends.length ? 0 : lo;
  }

  function arcStart(t, i) {
    return t.ends[(i - 1 + t.ends.length) % t.ends.length];
  }

  const same = (a, b) => a.owner === b.owner && a.gen === b.gen && a.state === b.state;

  // assign sets ranges of t: each item has start, end (BigInt) and upd,
  // a function from the old value to the new. The items must not overlap.
  function assign(t, items) {
    if (items.length === 0) return t;
    items = items.slice().sort((a, b) => cmp(a.end, b.end));
    const points = t.ends.slice();
    for (const it of items) points.push(it.start, it.end);
    points.sort(cmp);
    const ends = [], vals = [];
    let prev = null;
    for (const p of points) {
      if (prev !== null && p === prev) continue;
      prev = p;
      // The item whose range holds p: the first ending at or after p.
      let lo = 0, hi = items.length;
      while (lo < hi) {
        const m = (lo + hi) >> 1;
        if (items[m].end < p) lo = m + 1; else hi = m;
      }
      // Past the last end, that is the first item: the one across zero,
      // if any. The items do not overlap, so no other can hold p.
      const it = items[lo === items.length ? 0 : lo];
      const old = t.vals[find(t, p)];
      ends.push(p);
      vals.push(contains(it.start, it.end, p) ? it.upd(old) : old);
    }
    return compact({ ends, vals });
  }

  function compact(t) {
    const ends = [], vals = [];
    for (let i = 0; i < t.ends.length; i++) {
      const k = vals.length - 1;
      if (k >= 0 && same(vals[k], t.vals[i])) {
        ends[k] = t.ends[i];
        continue;
      }
      ends.push(t.ends[i]);
      vals.push(t.vals[i]);
    }
    // Across the wrap: the last arc merges into arc 0.
    if (ends.length > 1 && same(vals[vals.length - 1], vals[0])) {
      ends.pop();
      vals.pop();
    }
    return { ends, vals };
  }

  function shareOf(t, i) {
    if (t.ends.length === 1) return 1;
    const s = arcStart(t, i), e = t.ends[i];
    const n = e > s ? e - s : (1n << 64n) - s + e;
    return Number(n) / TWO64;
  }

  // ---------- colours ----------

  // Owners get the colours of a categorical palette in the order the page
  // first sees them (by name within a snapshot), then hues from their
  // names' hash.
  const PALETTE = [[78, 121, 167], [242, 142, 43], [225, 87, 89], [118, 183, 178], [89, 161, 79],
    [237, 201, 72], [176, 122, 161], [255, 157, 167], [156, 117, 95], [23, 190, 207]];
  const colours = new Map();
  function colour(owner, alpha) {
    const a = alpha === undefined ? 1 : alpha;
    if (!owner) return "rgba(217,220,227," + a + ")";
    let c = colours.get(owner);
    if (!c) {
      if (colours.size < PALETTE.length) {
        c = "rgba(" + PALETTE[colours.size].join(",") + ",";
      } else {
        let h = 2166136261;
        for (let i = 0; i < owner.length; i++) { h ^= owner.charCodeAt(i); h = Math.imul(h, 16777619); }
        c = "hsla(" + ((h >>> 0) % 360) + "," + (55 + ((h >>> 9) % 20)) + "%," + (45 + ((h >>> 17) % 12)) + "%,";
      }
      colours.set(owner, c);
    }
    return c + a + ")";
  }

  // ---------- DOM helpers ----------

  const $ = (sel, root) => (root || document).querySelector(sel);
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else if (k === "style") Object.assign(e.style, v);
      else if (k.startsWith("data-")) e.setAttribute(k, v);
      else e[k] = v;
    }
    for (const k of kids) e.append(k);
    return e;
  }
  const pct = (x) => (x * 100).toFixed(x < 0.001 && x > 0 ? 3 : 1) + "%";

  async function getJSON(path) {
    const r = await fetch(path, { headers: { Accept: "application/json" }, cache: "no-store" });
    const body = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(body.error || r.status + " " + r.statusText);
    return body;
  }

  async function postJSON(path, body) {
    const r = await fetch(path, { method: "POST", headers: { "Content-Type": "application/json" }, body: body === undefined ? "" : JSON.stringify(body) });
    const out = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(out.error || r.status + " " + r.statusText);
    return out;
  }

  // ---------- namespaces ----------

  function nsView(d) {
    let v = state.ns.get(d.name);
    if (!v) {
      const node = $("#ns-template").content.firstElementChild.cloneNode(true);
      node.id = "ns-" + d.name;
      node.dataset.namespace = d.name;
      $("#namespaces").append(node);
      v = { name: d.name, node, table: tableFrom([]), owners: [], filter: "" };
      const sel = $(".owner-filter", node);
      sel.addEventListener("change", () => { v.filter = sel.value; renderArcs(v); });
      wireTip(v);
      state.ns.set(d.name, v);
    }
    v.cfg = d;
    $(".ns-name", v.node).textContent = d.name;
    $(".ns-meta", v.node).textContent = "ring " + d.ring_size + " · header " + d.header + " · lease " + d.lease_duration;
    return v;
  }

  function dropNamespace(name) {
    const v = state.ns.get(name);
    if (v) { v.node.remove(); state.ns.delete(name); delete state.drawn[name]; }
  }

  const dirty = new Set();
  let frame = 0;
  function redraw(v) {
    dirty.add(v);
    if (!frame) frame = requestAnimationFrame(() => {
      frame = 0;
      for (const x of dirty) { drawRing(x); renderOwners(x); renderArcs(x); }
      dirty.clear();
    });
  }

  // drawRing draws the circle: one annulus sector per run of arcs with one
  // owner and state (at R = 65536, a few thousand sectors, not one per
  // entry). Recalling arcs are paler, free ones grey.
  function drawRing(v) {
    const c = $("canvas.ring", v.node);
    const dpr = window.devicePixelRatio || 1;
    const size = 360;
    if (c.width !== size * dpr) { c.width = size * dpr; c.height = size * dpr; }
    const g = c.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, size, size);
    const cx = size / 2, cy = size / 2, ro = size / 2 - 8, ri = ro - 46;
    const t = v.table, n = t.ends.length;
    const runs = [];
    for (let i = 0; i < n; i++) {
      const val = t.vals[i];
      const k = runs.length - 1;
      if (k >= 0 && runs[k].owner === val.owner && runs[k].state === val.state) { runs[k].end = t.ends[i]; continue; }
      runs.push({ start: arcStart(t, i), end: t.ends[i], owner: val.owner, state: val.state });
    }
    if (runs.length > 1 && runs[0].owner === runs[runs.length - 1].owner && runs[0].state === runs[runs.length - 1].state) {
      runs[0].start = runs.pop().start;
    }
    const top = -Math.PI / 2;
    for (const r of runs) {
      const whole = runs.length === 1;
      let a0 = top + frac(r.start) * 2 * Math.PI, a1 = top + frac(r.end) * 2 * Math.PI;
      if (whole) { a0 = top; a1 = top + 2 * Math.PI; } else if (a1 <= a0) a1 += 2 * Math.PI;
      g.beginPath();
      g.arc(cx, cy, ro, a0, a1);
      g.arc(cx, cy, ri, a1, a0, true);
      g.closePath();
      g.fillStyle = r.state === "free" ? colour("") : colour(r.owner, r.state === "recalling" ? 0.4 : 1);
      g.fill();
    }
    // Centre: the owners' shares.
    const shares = ownerShares(v);
    g.fillStyle = "#1d2330";
    g.textAlign = "center";
    g.font = "600 15px system-ui, sans-serif";
    g.fillText(v.name, cx, cy - 8);
    g.font = "12px system-ui, sans-serif";
    g.fillStyle = "#6b7385";
    g.fillText(shares.size + " owner" + (shares.size === 1 ? "" : "s") + " · " + n + " arc" + (n === 1 ? "" : "s"), cx, cy + 12);
    state.drawn[v.name] = runs.map((r) => ({ start: hex(r.start), end: hex(r.end), owner: r.owner, state: r.state }));
    c.dataset.runs = String(runs.length);
    c.dataset.owners = [...new Set(runs.filter((r) => r.state !== "free").map((r) => r.owner))].sort().join(",");
    c.setAttribute("aria-label", "ring of " + v.name + ": " + [...shares].map(([o, s]) => o + " " + pct(s)).join(", "));
    $(".ring-note", v.node).textContent = runs.length === 1 && !runs[0].owner ? "no owner holds anything yet" : "";
  }

  function ownerShares(v) {
    const m = new Map();
    const t = v.table;
    for (let i = 0; i < t.ends.length; i++) {
      const val = t.vals[i];
      if (val.state === "free" || !val.owner) continue;
      m.set(val.owner, (m.get(val.owner) || 0) + shareOf(t, i));
    }
    return m;
  }

  function wireTip(v) {
    const c = $("canvas.ring", v.node), tip = $(".tip", v.node);
    c.addEventListener("mousemove", (e) => {
      const r = c.getBoundingClientRect();
      const x = e.clientX - r.left - r.width / 2, y = e.clientY - r.top - r.height / 2;
      const d = Math.hypot(x, y);
      if (d < r.width / 2 - 54 || d > r.width / 2 - 8) { tip.hidden = true; return; }
      let f = (Math.atan2(y, x) + Math.PI / 2) / (2 * Math.PI);
      if (f < 0) f += 1;
      const p = BigInt(Math.floor(f * 9007199254740992)) << 11n;
      const i = find(v.table, p), val = v.table.vals[i];
      tip.textContent = (val.owner || "free") + " · gen " + val.gen + " · " + val.state;
      tip.style.left = (e.clientX - r.left + 12) + "px";
      tip.style.top = (e.clientY - r.top + 12) + "px";
      tip.hidden = false;
    });
    c.addEventListener("mouseleave", () => { tip.hidden = true; });
  }

  function ago(iso) {
    if (!iso) return "—";
    const s = (Date.now() - Date.parse(iso)) / 1000;
    if (!isFinite(s)) return "—";
    if (s < 1) return "just now";
    if (s < 90) return s.toFixed(1) + " s ago";
    return Math.round(s / 60) + " min ago";
  }

  function renderOwners(v) {
    const shares = ownerShares(v);
    const body = $("table.owners tbody", v.node);
    body.textContent = "";
    const names = new Set(v.owners.map((o) => o.name));
    const rows = v.owners.slice();
    // Holders of arcs without a session (an ended one's orphans).
    for (const name of shares.keys()) if (!names.has(name)) rows.push({ name, addr: "", vnodes: 0, gone: true });
    for (const o of rows) {
      const st = o.gone ? "no session" : o.waiting ? "waiting" : o.draining ? "draining" : "serving";
      const btn = el("button", { class: "small", type: "button", textContent: "Drain", title: "recall its ranges and take it out of the ring" });
      btn.disabled = o.gone || o.draining;
      btn.addEventListener("click", () => drain(v.name, o.name, btn));
      body.append(el("tr", { "data-owner": o.name },
        el("td", {}, el("span", { class: "swatch", style: { background: colour(o.name) } }), o.name),
        el("td", { class: "mono", textContent: o.addr || "" }),
        el("td", { class: "num", textContent: pct(shares.get(o.name) || 0) }),
        el("td", { class: "num", textContent: String(o.vnodes || 0) }),
        el("td", { class: "num", textContent: o.load == null ? "—" : String(o.load) }),
        el("td", { class: "heard", textContent: ago(o.last_heard), title: o.last_heard || "only the leader hears renewals", "data-at": o.last_heard || "" }),
        el("td", { textContent: st }),
        el("td", {}, btn)));
    }
    const sel = $(".owner-filter", v.node);
    const want = ["", ...[...new Set([...names, ...shares.keys()])].sort()];
    if ([...sel.options].map((o) => o.value).join("\n") !== want.join("\n")) {
      sel.textContent = "";
      for (const w of want) sel.append(el("option", { value: w, textContent: w || "all" }));
      sel.value = want.includes(v.filter) ? v.filter : "";
    }
  }

  function renderArcs(v) {
    const t = v.table;
    const body = $("table.arcs tbody", v.node);
    body.textContent = "";
    let shown = 0, matching = 0;
    const frag = document.createDocumentFragment();
    for (let i = 0; i < t.ends.length; i++) {
      const val = t.vals[i];
      if (v.filter && val.owner !== v.filter) continue;
      matching++;
      if (shown >= MAX_ROWS) continue;
      shown++;
      const s = hex(arcStart(t, i)), e = hex(t.ends[i]);
      frag.append(el("tr", { class: "state-" + val.state, "data-start": s, "data-end": e, "data-owner": val.owner, "data-gen": String(val.gen), "data-state": val.state },
        el("td", { class: "num", textContent: String(i) }),
        el("td", { class: "mono", textContent: s }),
        el("td", { class: "mono", textContent: e }),
        el("td", {}, val.owner ? el("span", { class: "swatch", style: { background: colour(val.owner) } }) : "", val.owner || "—"),
        el("td", { class: "num", textContent: String(val.gen) }),
        el("td", { textContent: val.state }),
        el("td", { class: "num", textContent: pct(shareOf(t, i)) })));
    }
    body.append(frag);
    $(".arcs-note", v.node).textContent = matching > shown
      ? "(" + shown + " of " + matching + " arcs shown)"
      : "(" + matching + " arc" + (matching === 1 ? "" : "s") + ")";
    $(".arcs", v.node).dataset.arcs = String(t.ends.length);
  }

  // ---------- loading and the event stream ----------

  // loadSnapshot loads every table; calls while one loads make it load
  // once more after, so that only one is ever in flight.
  let again = false;
  async function loadSnapshot() {
    if (state.loading) { again = true; return; }
    state.loading = true;
    try {
      const s = await getJSON("/ui/api/snapshot");
      state.seq = s.seq;
      state.source = s.source;
      state.role = s.role;
      $("#node").textContent = s.node + " · " + s.role;
      const names = new Set();
      for (const d of s.namespaces) {
        names.add(d.name);
        const v = nsView(d);
        v.table = tableFrom(d.arcs || []);
        v.owners = d.owners;
        for (const o of d.owners) colour(o.name);
        v.lsn = d.lsn;
      }
      for (const name of [...state.ns.keys()]) if (!names.has(name)) dropNamespace(name);
      const pend = state.pending;
      state.pending = [];
      for (const p of pend) if (p.seq > state.seq) applyDelta(p.seq, p.d);
      for (const v of state.ns.values()) redraw(v);
      banner();
    } catch (err) {
      $("#banner").textContent = "could not load the tables: " + err.message;
      again = true;
      await new Promise((ok) => setTimeout(ok, 2000));
    } finally {
      state.loading = false;
      if (again) { again = false; loadSnapshot(); }
    }
  }

  function applyDelta(seq, d) {
    const v = state.ns.get(d.namespace);
    if (!v) return;
    const items = [];
    for (const a of d.arcs || []) {
      const val = { owner: a.owner, gen: a.generation, state: a.state };
      items.push({ start: big(a.start), end: big(a.end), upd: () => val });
    }
    for (const a of d.states || []) {
      items.push({ start: big(a.start), end: big(a.end), upd: (old) => (old.state === "free" ? old : { owner: old.owner, gen: old.gen, state: a.state }) });
    }
    v.table = assign(v.table, items);
    if (d.lsn) v.lsn = d.lsn;
    redraw(v);
  }

  function seqOf(e) {
    const id = e.lastEventId || "";
    const k = id.lastIndexOf(":");
    return k < 0 ? 0 : Number(id.slice(k + 1));
  }

  let ownersTimer = 0;
  function ownersSoon() {
    clearTimeout(ownersTimer);
    ownersTimer = setTimeout(pollOwners, 250);
  }

  function logEvent(ev) {
    const text = describe(ev);
    const li = el("li", { "data-kind": ev.kind, "data-owner": ev.owner || "", "data-namespace": ev.namespace, "data-seq": String(ev.seq) },
      el("time", { textContent: new Date(ev.at).toISOString().slice(11, 23), title: ev.at }),
      el("span", { class: "kind kind-" + ev.kind, textContent: ev.kind }),
      el("span", { class: "muted", textContent: ev.namespace + " " }),
      text);
    const log = $("#log");
    log.prepend(li);
    while (log.children.length > MAX_LOG) log.lastElementChild.remove();
    state.logCount++;
    $("#log-count").textContent = "(" + state.logCount + ")";
  }

  function describe(e) {
    const arcs = e.arcs + " arc" + (e.arcs === 1 ? "" : "s") + " (" + pct(e.share || 0) + ")";
    switch (e.kind) {
      case "grant": return "granted " + arcs + " to " + e.owner + (e.from ? ", held by " + e.from + " before" : ", free before") + ", generation " + e.generation;
      case "loss": return "lookups notify loss: " + arcs + " that " + e.owner + " held changed generation";
      case "recall": return "recalled " + arcs + " from " + e.owner;
      case "keep": return "recall cancelled: " + e.owner + " keeps " + arcs;
      case "expiry": return arcs + " of " + e.owner + " expired unrenewed";
      case "join": return e.owner + " joined at " + (e.detail || "?");
      case "restart": return e.owner + " restarted at " + (e.detail || "?");
      case "drain": return e.owner + " left the ring (drained, or left cleanly)";
      case "end": return e.owner + "'s session ended";
      case "create": return "namespace created";
      case "delete": return "namespace deleted";
    }
    return JSON.stringify(e);
  }

  function connect() {
    const es = new EventSource("/v1/events");
    const ind = $("#stream");
    es.addEventListener("open", () => {
      ind.textContent = "live";
      ind.className = "badge on";
    });
    es.addEventListener("error", () => {
      ind.textContent = "reconnecting";
      ind.className = "badge off";
    });
    es.addEventListener("hello", (e) => {
      const h = JSON.parse(e.data);
      if (state.epoch && h.epoch !== state.epoch) { $("#log").textContent = ""; state.logCount = 0; }
      state.epoch = h.epoch;
      // Subscribed: load the tables now, so that every delta after the
      // snapshot reaches this page. On a reconnection the deltas in
      // between are gone, so they load again.
      loadSnapshot();
    });
    es.addEventListener("log", (e) => {
      const ev = JSON.parse(e.data);
      logEvent(ev);
      switch (ev.kind) {
        case "create": case "delete": loadSnapshot(); break;
        case "join": case "restart": case "drain": case "end": ownersSoon(); break;
      }
    });
    es.addEventListener("delta", (e) => {
      const seq = seqOf(e), d = JSON.parse(e.data);
      if (state.loading) { state.pending.push({ seq, d }); return; }
      if (seq > state.seq) applyDelta(seq, d);
    });
  }

  // ---------- polling ----------

  async function pollCluster() {
    try {
      const c = await getJSON("/v1/cluster");
      state.cluster = c;
      const body = $("#cluster tbody");
      body.textContent = "";
      for (const s of c.servers) {
        const lead = s.id === c.leader_id;
        body.append(el("tr", { "data-node": s.id, class: lead ? "leader" : "" },
          el("td", { textContent: s.id + (s.id === c.node_id ? " (this node)" : "") }),
          el("td", { class: "mono", textContent: s.address }),
          el("td", { textContent: s.suffrage }),
          el("td", { textContent: lead ? "leader" : "follower" })));
      }
      $("#cluster-summary").textContent = "leader " + (c.leader_id || "none") + " · term " + c.term + " · commit index " + c.commit_index + " · last index " + c.last_index;
      $("#node").textContent = c.node_id + " · " + c.role;
      if (c.role !== state.role && state.role) loadSnapshot();
      state.role = c.role;
      banner();
    } catch (err) {
      $("#cluster-summary").textContent = "cluster: " + err.message;
    }
  }

  function banner() {
    const b = $("#banner");
    b.textContent = "";
    const c = state.cluster;
    if (state.source === "replica") {
      b.append("This node is a standby: its tables are the replicated view (no recall states, no renewals). ");
      if (c && c.leader_http) {
        b.append(el("a", { href: location.protocol + "//" + c.leader_http + "/ui/", textContent: "The leader's dashboard" }));
      }
    }
  }

  async function pollOwners() {
    if (document.hidden) return;
    try {
      const s = await getJSON("/ui/api/owners");
      for (const d of s.namespaces) {
        const v = state.ns.get(d.name);
        if (!v) continue;
        v.owners = d.owners;
        renderOwners(v);
      }
    } catch (err) { /* the next poll tries again */ }
  }

  // ---------- forms ----------

  function status(msg, ok) {
    const p = $("#admin-status");
    p.textContent = msg;
    p.className = ok ? "ok" : "err";
  }

  async function drain(ns, owner, btn) {
    btn.disabled = true;
    try {
      await postJSON("/v1/namespaces/" + encodeURIComponent(ns) + "/owners/" + encodeURIComponent(owner) + "/drain");
      status("draining " + owner + " in " + ns, true);
      ownersSoon();
    } catch (err) {
      status("drain " + owner + ": " + err.message, false);
      btn.disabled = false;
    }
  }

  function wireForms() {
    const f = $("#create-ns");
    const size = f.elements.ring_size;
    size.addEventListener("input", () => { $("#ring-cap-note").hidden = !(Number(size.value) > 4096); });
    f.addEventListener("submit", async (e) => {
      e.preventDefault();
      const body = { name: f.elements.name.value.trim() };
      if (size.value) body.ring_size = Number(size.value);
      if (f.elements.header.value.trim()) body.header = f.elements.header.value.trim();
      if (f.elements.lease_duration.value.trim()) body.lease_duration = f.elements.lease_duration.value.trim();
      try {
        const out = await postJSON("/v1/namespaces", body);
        status("created " + out.name + " (ring " + out.ring_size + ")", true);
        f.reset();
        loadSnapshot();
      } catch (err) {
        status("create " + body.name + ": " + err.message, false);
      }
    });
  }

  // For tests and curious operators: what the page holds and drew.
  window.fuge = {
    drawn: (ns) => state.drawn[ns] || [],
    arcs: (ns) => {
      const v = state.ns.get(ns);
      if (!v) return [];
      return v.table.ends.map((e, i) => ({ start: hex(arcStart(v.table, i)), end: hex(e), owner: v.table.vals[i].owner, generation: v.table.vals[i].gen, state: v.table.vals[i].state }));
    },
    seq: () => state.seq,
  };

  wireForms();
  connect();
  pollCluster();
  setInterval(pollCluster, POLL_MS);
  setInterval(pollOwners, POLL_MS);
  setInterval(() => {
    for (const td of document.querySelectorAll("td.heard")) td.textContent = ago(td.dataset.at);
  }, 1000);
})();
