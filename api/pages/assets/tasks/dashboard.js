"use strict";
// The task dashboard: polls queue-status and task-statistics (and the
// workers and recent tasks) every 5 seconds; commands POST with the
// X-CSRFToken header taken from the csrftoken cookie.
(function () {
  const POLL_MS = 5000;
  const $ = (id) => document.getElementById(id);

  function csrfToken() {
    const m = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return m ? decodeURIComponent(m[1]) : "";
  }

  function showError(msg) {
    const el = $("error");
    el.textContent = msg;
    el.hidden = false;
  }
  function clearError() { $("error").hidden = true; }

  async function api(path, body) {
    const opts = { credentials: "same-origin", headers: { Accept: "application/json" } };
    if (body !== undefined) {
      opts.method = "POST";
      opts.headers["Content-Type"] = "application/json";
      opts.headers["X-CSRFToken"] = csrfToken();
      opts.body = JSON.stringify(body);
    }
    const res = await fetch(path, opts);
    let data = null;
    try { data = await res.json(); } catch (_) { /* empty or not JSON */ }
    if (res.status === 401) { location.reload(); }
    if (!res.ok) {
      const msg = (data && data.error) ? data.error : res.statusText;
      throw new Error(path + ": " + res.status + " " + msg);
    }
    return { status: res.status, data: data };
  }

  function cell(tr, label, content) {
    const td = document.createElement("td");
    td.dataset.label = label;
    if (content instanceof Node) td.appendChild(content); else td.textContent = content;
    tr.appendChild(td);
    return td;
  }
  function badge(text) {
    const b = document.createElement("span");
    b.className = "badge " + text;
    b.textContent = text;
    return b;
  }
  function buttons(list) {
    const div = document.createElement("div");
    div.className = "actions";
    for (const [label, fn, name] of list) {
      const b = document.createElement("button");
      b.type = "button";
      b.textContent = label;
      b.dataset.action = name;
      b.addEventListener("click", async () => {
        b.disabled = true;
        try {
          const r = await fn();
          clearError();
          if (r.status === 202) showError("Accepted; it will show on a later refresh.");
        } catch (e) {
          showError(e.message);
        } finally {
          b.disabled = false;
          refresh();
        }
      });
      div.appendChild(b);
    }
    return div;
  }
  function when(ts) {
    if (!ts) return "–";
    const d = new Date(ts);
    return d.toLocaleTimeString();
  }

  const manageQueue = (action, name) => api("/api/tasks/queue-manage/", { action: action, queue_name: name });
  const manageWorker = (action, id) => api("/api/tasks/worker-manage/", { action: action, worker_id: id });

  function renderQueues(queues) {
    const body = $("queues");
    body.replaceChildren();
    for (const q of queues) {
      const tr = document.createElement("tr");
      tr.dataset.queue = q.name;
      cell(tr, "Queue", q.name);
      cell(tr, "Waiting", String(q.size));
      cell(tr, "Running", String(q.active));
      cell(tr, "Workers", String(q.workers));
      cell(tr, "State", badge(q.is_paused ? "paused" : "running")).className = "state";
      cell(tr, "Actions", buttons([
        q.is_paused ? ["Resume", () => manageQueue("resume", q.name), "resume"] : ["Pause", () => manageQueue("pause", q.name), "pause"],
        ["Clear", () => {
          if (!confirm("Remove every waiting task of " + q.name + "?")) return Promise.resolve({ status: 200 });
          return manageQueue("clear", q.name);
        }, "clear"],
      ]));
      body.appendChild(tr);
    }
  }

  function renderWorkers(workers) {
    const body = $("workers");
    body.replaceChildren();
    $("no-workers").hidden = workers.length > 0;
    for (const w of workers) {
      const tr = document.createElement("tr");
      tr.dataset.worker = w.worker_id;
      cell(tr, "Worker", w.worker_id);
      cell(tr, "State", badge(w.state));
      cell(tr, "Queues", (w.queues || []).join(", "));
      cell(tr, "Running", String(w.active));
      cell(tr, "Last beat", when(w.heartbeat_at));
      cell(tr, "Actions", buttons([
        ["Start", () => manageWorker("start", w.worker_id), "start"],
        ["Stop", () => manageWorker("stop", w.worker_id), "stop"],
        ["Restart", () => manageWorker("restart", w.worker_id), "restart"],
      ]));
      body.appendChild(tr);
    }
    $("stat-workers").textContent = String(workers.filter((w) => w.state === "running").length);
  }

  function renderTasks(tasks) {
    const body = $("tasks");
    body.replaceChildren();
    for (const t of tasks) {
      const tr = document.createElement("tr");
      cell(tr, "Task", t.id);
      cell(tr, "Queue", t.queue);
      cell(tr, "Type", t.type);
      cell(tr, "State", badge(t.state)).title = t.error || "";
      cell(tr, "Attempts", String(t.attempts));
      cell(tr, "Updated", when(t.updated_at));
      body.appendChild(tr);
    }
  }

  function renderStats(s) {
    $("stat-total").textContent = String(s.total_tasks);
    $("stat-completed").textContent = String(s.completed_tasks);
    $("stat-failed").textContent = String(s.failed_tasks);
    $("stat-pending").textContent = String(s.pending_tasks);
    $("stat-rate").textContent = s.success_rate.toFixed(1) + " %";
  }

  let inflight = false;
  async function refresh() {
    if (inflight) return;
    inflight = true;
    try {
      const [qs, st, ws, ts] = await Promise.all([
        api("/api/tasks/queue-status/"),
        api("/api/tasks/task-statistics/"),
        api("/api/tasks/workers/"),
        api("/api/tasks/recent/?limit=50"),
      ]);
      renderQueues(qs.data.queues);
      renderStats(st.data);
      renderWorkers(ws.data.workers);
      renderTasks(ts.data.tasks);
      $("updated").textContent = "updated " + new Date().toLocaleTimeString();
      document.body.dataset.polls = String(Number(document.body.dataset.polls || 0) + 1);
    } catch (e) {
      showError("Refresh failed: " + e.message);
    } finally {
      inflight = false;
    }
  }

  for (const b of document.querySelectorAll("nav button")) {
    b.addEventListener("click", () => {
      for (const o of document.querySelectorAll("nav button")) {
        o.setAttribute("aria-selected", String(o === b));
        $("tab-" + o.dataset.tab).hidden = o !== b;
      }
    });
  }
  refresh();
  setInterval(refresh, POLL_MS);
})();
