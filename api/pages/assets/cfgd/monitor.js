"use strict";
// The gRPC monitoring page: every 5 seconds it reads the overview, the
// per-minute timeline (charted with uPlot), the services and methods
// statistics and the latest requests from /api/grpc/monitor/; a failed
// call is shown in the banner, never swallowed.
(function () {
  const POLL_MS = 5000;
  const API = "/api/grpc/monitor/";
  const $ = (id) => document.getElementById(id);
  const state = { hours: 1, filter: { service: "", method: "", status: "" } };
  let timer = null;
  let charts = null;

  function showError(msgs) {
    const el = $("error");
    if (msgs.length === 0) { el.hidden = true; return; }
    el.textContent = msgs.join(" · ");
    el.hidden = false;
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
    try { data = await res.json(); } catch (_) { /* empty or not JSON */ }
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

  function renderOverview(o) {
    $("stat-total").textContent = fmt.int(o.total_requests);
    $("stat-failed").textContent = fmt.int(o.failed_requests);
    $("stat-rate").textContent = fmt.pct(o.success_rate);
    $("stat-avg").textContent = fmt.ms(o.avg_duration_ms);
    $("stat-services").textContent = fmt.int(o.total_services);
    $("stat-keys").textContent = fmt.int(o.active_api_keys);
  }

  function renderServices(list) {
    const rows = list.map((s) => {
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
    const rows = list.map((m) => {
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

  function renderRequests(page) {
    const rows = page.results.map((r) => {
      const tr = document.createElement("tr");
      cell(tr, "Time", fmt.time(r.created_at));
      cell(tr, "Service", r.service_name, "wrap");
      cell(tr, "Method", r.method_name, "wrap");
      cell(tr, "Status", badge(r.status));
      cell(tr, "Code", r.grpc_status_code || "–");
      cell(tr, "Duration", r.duration_ms + " ms", "num");
      cell(tr, "Caller", r.api_key_name || r.username || r.client_ip || "–", "wrap");
      cell(tr, "Error", r.error_message || "", "wrap");
      return tr;
    });
    fill($("requests"), rows, 8, "No request matches.");
    $("requests-count").textContent = fmt.int(page.count) + " matching";
  }

  // Charts: one for the request rate, one for the error rate, sharing the
  // time axis. They are sized to their box and resized with the window.
  function chartWidth(el) { return Math.max(200, el.clientWidth); }
  function makeChart(el, label, color) {
    const opts = {
      width: chartWidth(el), height: 200,
      scales: { x: { time: true } },
      series: [{}, { label: label, stroke: color, width: 2, fill: color + "22", points: { show: false } }],
      axes: [{}, { size: 50 }],
      legend: { show: true },
    };
    return new uPlot(opts, [[], []], el);
  }
  function renderTimeline(tl) {
    if (typeof uPlot === "undefined") throw new Error("chart library not loaded");
    if (!charts) {
      charts = {
        rate: makeChart($("chart-rate"), "Requests / min", "#2457d6"),
        errors: makeChart($("chart-errors"), "Error rate %", "#b42318"),
      };
    }
    const perMinute = tl.step_seconds / 60;
    const xs = tl.points.map((p) => Date.parse(p.time) / 1000);
    charts.rate.setData([xs, tl.points.map((p) => p.requests / perMinute)]);
    charts.errors.setData([xs, tl.points.map((p) => p.error_rate)]);
    $("chart-step").textContent = tl.step_seconds === 60 ? "(1-minute buckets)" : "(1-hour buckets, averaged per minute)";
  }
  function resizeCharts() {
    if (!charts) return;
    charts.rate.setSize({ width: chartWidth($("chart-rate")), height: 200 });
    charts.errors.setSize({ width: chartWidth($("chart-errors")), height: 200 });
  }

  async function refresh() {
    clearTimeout(timer);
    const h = state.hours;
    const f = state.filter;
    const jobs = [
      get("overview", { hours: h }).then(renderOverview),
      get("timeline", { hours: h }).then(renderTimeline),
      get("services", { hours: h }).then((d) => renderServices(d.services)),
      get("methods", { hours: h, service: f.service }).then((d) => renderMethods(d.methods)),
      get("requests", { service: f.service, method: f.method, status: f.status, page_size: 50 }).then(renderRequests),
    ];
    const results = await Promise.allSettled(jobs);
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
  window.addEventListener("resize", resizeCharts);
  refresh();
})();
