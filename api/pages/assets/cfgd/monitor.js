"use strict";
// The gRPC monitoring page: every 5 seconds it reads the overview, the
// per-minute series with its latency percentiles (charted with uPlot), the
// services and methods statistics, the breakdowns by caller and status
// code and the latest requests of the chosen window from
// /api/grpc/monitor/; a failed call is shown in the banner, never
// swallowed. cfgd's own health and reflection traffic is hidden unless the
// toggle shows it; a click on a request opens it in full.
(function () {
  const POLL_MS = 5000;
  const API = "/api/grpc/monitor/";
  const $ = (id) => document.getElementById(id);
  const state = { hours: 1, internal: false, filter: { service: "", method: "", status: "" } };
  // cfgd's own services, from the page (requestlogview.InternalServices).
  const INTERNAL = new Set((document.body.dataset.internal || "").split(" ").filter(Boolean));
  const shown = (service) => state.internal || !INTERNAL.has(service);
  let timer = null;
  let charts = null;
  // generation counts refreshes: a slow answer of an earlier one (another
  // window, the toggle flipped since) is dropped, not drawn over a newer.
  let generation = 0;

  function showError(msgs) {
    const el = $("error");
    if (msgs.length === 0) { el.hidden = true; return; }
    el.textContent = msgs.join(" · ");
    el.hidden = false;
  }

  // Request-log ids reach 2^63 (the partition is in the top bits), past
  // the integers a JS number holds exactly: an id is kept as its digits
  // where the browser gives a reviver the source text.
  function exactIDs(key, value, ctx) {
    return key === "id" && ctx && typeof ctx.source === "string" ? ctx.source : value;
  }

  async function get(path, params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params || {})) if (v !== "" && v !== undefined) q.set(k, v);
    const url = API + path + "/" + (q.toString() ? "?" + q : "");
    let res;
    try {
      res = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
    } catch (e) {
      throw new Error(path + ": network error (" + e.message + ")");
    }
    let data = null;
    try { data = JSON.parse(await res.text(), exactIDs); } catch (_) { /* empty or not JSON */ }
    if (res.status === 401) { location.reload(); }
    if (!res.ok) {
      let msg = (data && data.error) ? data.error : res.statusText;
      if (data && data.errors) msg += " " + JSON.stringify(data.errors);
      throw new Error(path + ": " + res.status + " " + msg);
    }
    return data;
  }

  const fmt = {
    int: (n) => Number(n).toLocaleString("en"),
    pct: (n) => Number(n).toFixed(1) + " %",
    ms: (n) => Number(n).toFixed(1) + " ms",
    time: (ts) => {
      if (!ts) return "–";
      const d = new Date(ts);
      return isNaN(d) ? ts : d.toLocaleString();
    },
  };

  function cell(tr, label, content, cls) {
    const td = document.createElement("td");
    td.dataset.label = label;
    if (cls) td.className = cls;
    if (content instanceof Node) td.appendChild(content); else td.textContent = content;
    tr.appendChild(td);
    return td;
  }
  function badge(text) {
    const b = document.createElement("span");
    b.className = "badge st-" + text;
    b.textContent = text;
    return b;
  }
  function fill(tbody, rows, cols, empty) {
    tbody.textContent = "";
    if (rows.length === 0) {
      const tr = tbody.insertRow();
      const td = cell(tr, "", empty, "empty");
      td.colSpan = cols;
      return;
    }
    for (const r of rows) tbody.appendChild(r);
  }

  // Without cfgd's own traffic the cards are the sums of the services
  // shown: the overview endpoint counts every service.
  function overviewOf(o, services) {
    if (state.internal) return o;
    const list = services.filter((s) => shown(s.service_name));
    const sum = (f) => list.reduce((a, s) => a + f(s), 0);
    const total = sum((s) => s.total_requests);
    const ok = sum((s) => s.successful_requests);
    return {
      total_requests: total,
      successful_requests: ok,
      failed_requests: sum((s) => s.failed_requests),
      success_rate: total ? ok / total * 100 : 0,
      avg_duration_ms: total ? sum((s) => s.avg_duration_ms * s.total_requests) / total : 0,
      total_services: list.length,
      active_api_keys: o.active_api_keys,
    };
  }

  function renderOverview(o) {
    $("stat-total").textContent = fmt.int(o.total_requests);
    $("stat-failed").textContent = fmt.int(o.failed_requests);
    $("stat-rate").textContent = fmt.pct(o.success_rate);
    $("stat-avg").textContent = fmt.ms(o.avg_duration_ms);
    $("stat-services").textContent = fmt.int(o.total_services);
    $("stat-keys").textContent = fmt.int(o.active_api_keys);
  }

  function renderServices(list) {
    const rows = list.filter((s) => shown(s.service_name)).map((s) => {
      const tr = document.createElement("tr");
      tr.dataset.service = s.service_name;
      cell(tr, "Service", s.service_name, "wrap");
      cell(tr, "Requests", fmt.int(s.total_requests), "num");
      cell(tr, "Failed", fmt.int(s.failed_requests), "num");
      cell(tr, "Success", fmt.pct(s.success_rate), "num");
      cell(tr, "Avg", fmt.ms(s.avg_duration_ms), "num");
      cell(tr, "p95", fmt.ms(s.p95_duration_ms), "num");
      cell(tr, "Methods", fmt.int(s.methods_count), "num");
      return tr;
    });
    fill($("services"), rows, 7, "No requests in this window.");
  }

  function renderMethods(list) {
    const rows = list.filter((m) => shown(m.service_name)).map((m) => {
      const tr = document.createElement("tr");
      cell(tr, "Service", m.service_name, "wrap");
      cell(tr, "Method", m.method_name, "wrap");
      cell(tr, "Requests", fmt.int(m.total_requests), "num");
      cell(tr, "Failed", fmt.int(m.failed_requests), "num");
      cell(tr, "Success", fmt.pct(m.success_rate), "num");
      cell(tr, "Avg", fmt.ms(m.avg_duration_ms), "num");
      cell(tr, "Min / max", m.min_duration_ms + " / " + m.max_duration_ms + " ms", "num");
      cell(tr, "p95", fmt.ms(m.p95_duration_ms), "num");
      return tr;
    });
    fill($("methods"), rows, 8, "No requests in this window.");
  }

  // A callers row is one reporter (checked by cfgd at ingest) and what it
  // claims in its rows (api_key_id/user_id and names, never checked): the
  // claim is shown as such, and flagged when it names another key than
  // the one that reported it.
  function reporterLabel(by) {
    if (!by) return "unrecorded";
    const [kind, id] = by.split(":");
    if (kind === "api_key") return "API key #" + id;
    if (kind === "user") return "user #" + id;
    return by;
  }
  function claimLabel(c) {
    if (c.claimed_kind === "anonymous") return "anonymous";
    const what = c.claimed_kind === "api_key" ? "API key " : "user ";
    return what + (c.claimed_name ? c.claimed_name + " (#" + c.claimed_id + ")" : "#" + c.claimed_id);
  }
  function renderCallers(list) {
    const rows = list.map((c) => {
      const tr = document.createElement("tr");
      tr.dataset.kind = c.claimed_kind;
      tr.dataset.reportedBy = c.reported_by;
      cell(tr, "Reported by", reporterLabel(c.reported_by), "wrap");
      const claim = cell(tr, "Claimed caller", claimLabel(c), "wrap claimed");
      if (c.claimed_kind === "api_key" && c.reported_by.startsWith("api_key:") && c.reported_by !== "api_key:" + c.claimed_id) {
        const b = document.createElement("span");
        b.className = "badge st-error";
        b.title = "the rows name another API key than the one that reported them";
        b.textContent = "not the reporter";
        claim.append(" ", b);
        tr.dataset.mismatch = "true";
      }
      cell(tr, "Requests", fmt.int(c.total_requests), "num");
      cell(tr, "Failed", fmt.int(c.failed_requests), "num");
      cell(tr, "Success", fmt.pct(c.success_rate), "num");
      cell(tr, "Avg", fmt.ms(c.avg_duration_ms), "num");
      return tr;
    });
    fill($("callers"), rows, 6, "No requests in this window.");
  }
  function renderCodes(list) {
    const rows = list.map((c) => {
      const tr = document.createElement("tr");
      tr.dataset.code = c.grpc_status_code;
      const code = document.createElement("span");
      code.className = "badge " + (c.grpc_status_code === "OK" ? "st-success" : "st-error");
      code.textContent = c.grpc_status_code || "–";
      cell(tr, "Code", code);
      cell(tr, "Requests", fmt.int(c.requests), "num");
      cell(tr, "Share", fmt.pct(c.share), "num");
      cell(tr, "Avg", fmt.ms(c.avg_duration_ms), "num");
      return tr;
    });
    fill($("codes"), rows, 4, "No requests in this window.");
  }

  // The detail view: one request in full, read by its id.
  const DETAIL = [
    ["id", "ID"], ["request_id", "Request ID"], ["created_at", "Time"], ["service_name", "Service"], ["method_name", "Method"],
    ["status", "Status"], ["grpc_status_code", "gRPC code"], ["duration_ms", "Duration (ms)"], ["error_message", "Error"],
    ["reported_by", "Reported by (checked)"], ["client_ip", "Client IP (claimed)"], ["is_authenticated", "Authenticated (claimed)"],
    ["user_id", "User ID (claimed)"], ["username", "Username (claimed)"], ["api_key_id", "API key ID (claimed)"], ["api_key_name", "API key (claimed)"],
  ];
  async function openDetail(id) {
    const dl = $("detail-fields");
    dl.textContent = "";
    $("detail-title").textContent = "Request " + id;
    if (!$("detail").open) $("detail").showModal();
    try {
      const r = await get("requests/" + encodeURIComponent(id), {});
      for (const [k, label] of DETAIL) {
        const dt = document.createElement("dt");
        dt.textContent = label;
        const dd = document.createElement("dd");
        dd.dataset.field = k;
        const v = r[k];
        dd.textContent = k === "created_at" ? fmt.time(v) + " (" + v + ")" : (v === "" || v === undefined || v === null ? "–" : String(v));
        dl.append(dt, dd);
      }
    } catch (e) {
      const dd = document.createElement("dd");
      dd.className = "error";
      dd.textContent = e.message;
      dl.append(dd);
    }
  }

  function renderRequests(page) {
    const rows = page.results.map((r) => {
      const tr = document.createElement("tr");
      tr.dataset.id = r.id;
      tr.tabIndex = 0;
      tr.className = "clickable";
      cell(tr, "Time", fmt.time(r.created_at));
      cell(tr, "Service", r.service_name, "wrap");
      cell(tr, "Method", r.method_name, "wrap");
      cell(tr, "Status", badge(r.status));
      cell(tr, "Code", r.grpc_status_code || "–");
      cell(tr, "Duration", r.duration_ms + " ms", "num");
      cell(tr, "Claimed caller", r.api_key_name || r.username || r.client_ip || "–", "wrap");
      cell(tr, "Error", r.error_message || "", "wrap");
      return tr;
    });
    fill($("requests"), rows, 8, "No request matches.");
    $("requests-count").textContent = fmt.int(page.count) + " matching";
  }

  // Charts: the request rate, the error rate and the latency percentiles,
  // sharing the time axis and sized to their box. The last bucket is the
  // current one, still filling: each line's last segment is drawn dashed
  // and lighter by a second series holding only the last two points, so a
  // half-counted minute reads as such, not as a drop.
  function chartWidth(el) { return Math.max(200, el.clientWidth); }
  function makeChart(el, lines) {
    const series = [{}];
    for (const l of lines) {
      series.push({ label: l.label, stroke: l.color, width: 2, fill: l.fill ? l.color + "22" : undefined, spanGaps: l.spanGaps, points: { show: false } });
    }
    for (const l of lines) {
      series.push({ label: l.label + " (partial)", stroke: l.color + "99", width: 2, dash: [6, 4], spanGaps: true, points: { show: true, size: 5 } });
    }
    const opts = { width: chartWidth(el), height: 200, scales: { x: { time: true } }, series: series, axes: [{}, { size: 50 }], legend: { show: true } };
    const chart = new uPlot(opts, [[]].concat(series.slice(1).map(() => [])), el);
    // The partial series' legend rows repeat the full ones': hidden.
    el.querySelectorAll(".u-legend .u-series").forEach((row, i) => { if (i > lines.length) row.classList.add("partial-legend"); });
    return chart;
  }
  // split returns vals without its last point, and vals' last two points
  // alone (the last non-empty one before, when vals has gaps).
  function split(vals) {
    const n = vals.length;
    const full = vals.slice();
    full[n - 1] = null;
    const part = vals.map(() => null);
    part[n - 1] = vals[n - 1];
    for (let i = n - 2; i >= 0; i--) if (vals[i] !== null) { part[i] = vals[i]; break; }
    return [full, part];
  }
  function draw(chart, el, xs, columns, last) {
    const fulls = [], parts = [];
    for (const c of columns) { const [f, p] = split(c); fulls.push(f); parts.push(p); }
    chart.setData([xs].concat(fulls, parts));
    el.dataset.partialFrom = last ? last.time : "";
  }
  function renderSeries(lat) {
    if (typeof uPlot === "undefined") throw new Error("chart library not loaded");
    if (!charts) {
      charts = {
        rate: makeChart($("chart-rate"), [{ label: "Requests / min", color: "#2457d6", fill: true }]),
        errors: makeChart($("chart-errors"), [{ label: "Error rate %", color: "#b42318", fill: true }]),
        latency: makeChart($("chart-latency"), [
          { label: "p50", color: "#067647", spanGaps: true },
          { label: "p95", color: "#b54708", spanGaps: true },
          { label: "p99", color: "#b42318", spanGaps: true },
        ]),
      };
    }
    const pts = lat.points;
    const perMinute = lat.step_seconds / 60;
    const xs = pts.map((p) => Date.parse(p.time) / 1000);
    const last = pts[pts.length - 1];
    draw(charts.rate, $("chart-rate"), xs, [pts.map((p) => p.requests / perMinute)], last);
    draw(charts.errors, $("chart-errors"), xs, [pts.map((p) => p.error_rate)], last);
    draw(charts.latency, $("chart-latency"), xs, [pts.map((p) => p.p50_ms), pts.map((p) => p.p95_ms), pts.map((p) => p.p99_ms)], last);
    const unit = lat.step_seconds === 60 ? "minute" : "hour";
    $("chart-step").textContent = unit === "minute" ? "(1-minute buckets)" : "(1-hour buckets, averaged per minute)";
    $("partial-note").textContent = "Dashed: the current " + unit + ", still filling.";
  }
  function resizeCharts() {
    if (!charts) return;
    charts.rate.setSize({ width: chartWidth($("chart-rate")), height: 200 });
    charts.errors.setSize({ width: chartWidth($("chart-errors")), height: 200 });
    charts.latency.setSize({ width: chartWidth($("chart-latency")), height: 200 });
  }

  async function refresh() {
    clearTimeout(timer);
    const gen = ++generation;
    const current = (render) => (d) => { if (gen === generation) render(d); };
    const h = state.hours;
    const f = state.filter;
    const internal = state.internal ? "true" : "false";
    const services = get("services", { hours: h }).then((d) => d.services);
    const jobs = [
      Promise.all([get("overview", { hours: h }), services]).then(current(([o, s]) => renderOverview(overviewOf(o, s)))),
      get("latency", { hours: h, include_internal: internal }).then(current(renderSeries)),
      services.then(current(renderServices)),
      get("methods", { hours: h, service: f.service }).then(current((d) => renderMethods(d.methods))),
      get("callers", { hours: h, service: f.service, include_internal: internal }).then(current((d) => renderCallers(d.callers))),
      get("status-codes", { hours: h, service: f.service, include_internal: internal }).then(current((d) => renderCodes(d.status_codes))),
      get("requests", { service: f.service, method: f.method, status: f.status, hours: h, include_internal: internal, page_size: 50 }).then(current(renderRequests)),
    ];
    const results = await Promise.allSettled(jobs);
    if (gen !== generation) return; // a newer refresh owns the banner and the timer
    const errors = results.filter((r) => r.status === "rejected").map((r) => r.reason.message);
    showError(errors);
    $("updated").textContent = (errors.length ? "partly updated " : "updated ") + new Date().toLocaleTimeString();
    timer = setTimeout(refresh, POLL_MS);
  }

  $("hours").addEventListener("change", (ev) => {
    state.hours = Number(ev.target.value);
    refresh();
  });
  $("filters").addEventListener("submit", (ev) => {
    ev.preventDefault();
    state.filter = { service: $("f-service").value.trim(), method: $("f-method").value.trim(), status: $("f-status").value };
    refresh();
  });
  // A click on a service narrows the methods and the requests to it.
  $("services").addEventListener("click", (ev) => {
    const tr = ev.target.closest("tr[data-service]");
    if (!tr) return;
    $("f-service").value = tr.dataset.service;
    $("filters").requestSubmit();
  });
  $("f-internal").addEventListener("change", (ev) => {
    state.internal = ev.target.checked;
    refresh();
  });
  // A click (or Enter) on a request opens it in full.
  $("requests").addEventListener("click", (ev) => {
    const tr = ev.target.closest("tr[data-id]");
    if (tr) openDetail(tr.dataset.id);
  });
  $("requests").addEventListener("keydown", (ev) => {
    const tr = ev.target.closest("tr[data-id]");
    if (tr && ev.key === "Enter") openDetail(tr.dataset.id);
  });
  window.addEventListener("resize", resizeCharts);
  refresh();
})();
