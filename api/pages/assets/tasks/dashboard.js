"use strict";
// The task dashboard: polls queue-status and task-statistics (and the
// workers, the history, the selected queue's tasks and recent tasks) every
// 5 seconds; commands POST with the X-CSRFToken header taken from the
// csrftoken cookie. Every action is a cfgd command (an event), never a
// direct change in Redis.
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
  function notice(msg) {
    const el = $("notice");
    el.textContent = msg;
    el.hidden = !msg;
  }

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
          else if (r.data && typeof r.data.affected === "number") notice(r.data.action + ": " + r.data.affected + " task(s) of " + r.data.queue_name + " (" + r.data.state + ")");
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
  const manageTask = (action, t) => api("/api/tasks/task-manage/", { action: action, task_id: t.id, queue_name: t.queue });
  const manageBulk = (action, queue, state) => api("/api/tasks/bulk-manage/", { action: action, queue_name: queue, state: state });
  const confirmed = (question, fn) => () => confirm(question) ? fn() : Promise.resolve({ status: 200 });

  const STATES = ["pending", "active", "scheduled", "retry", "archived", "completed"];
  // Which actions make sense per state (the server refuses the others).
  const TASK_ACTIONS = {
    run: { label: (st) => (st === "retry" || st === "archived") ? "Retry" : "Run now", from: ["scheduled", "retry", "archived"] },
    archive: { label: () => "Archive", from: ["pending", "scheduled", "retry"] },
    delete: { label: () => "Delete", from: ["pending", "scheduled", "retry", "archived", "completed"] },
  };
  const selected = { queue: "", state: "pending" };
  let queueRows = [];

  function renderQueues(queues) {
    const body = $("queues");
    body.replaceChildren();
    for (const q of queues) {
      const tr = document.createElement("tr");
      tr.dataset.queue = q.name;
      const name = document.createElement("span");
      name.textContent = q.name + " ";
      if (!q.configured) name.appendChild(badge("seen"));
      cell(tr, "Queue", name);
      for (const st of STATES) {
        const b = document.createElement("button");
        b.type = "button";
        b.className = "linklike";
        b.textContent = String(q[st]);
        b.title = "Show the " + st + " tasks of " + q.name;
        b.addEventListener("click", () => { selected.queue = q.name; selected.state = st; showTab("tasks"); refresh(); });
        cell(tr, st[0].toUpperCase() + st.slice(1), b).dataset.state = st;
      }
      cell(tr, "Workers", String(q.workers));
      cell(tr, "State", badge(q.is_paused ? "paused" : "running")).className = "state";
      cell(tr, "Actions", q.configured ? buttons([
        q.is_paused ? ["Resume", () => manageQueue("resume", q.name), "resume"] : ["Pause", () => manageQueue("pause", q.name), "pause"],
        ["Clear", confirmed("Remove every waiting task of " + q.name + "?", () => manageQueue("clear", q.name)), "clear"],
      ]) : "–");
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
      const cur = w.current || [];
      if (cur.length === 0) {
        cell(tr, "Current tasks", w.active > 0 ? String(w.active) + " running" : "idle");
      } else {
        const ul = document.createElement("ul");
        ul.className = "current";
        for (const c of cur) {
          const li = document.createElement("li");
          li.textContent = c.type + " " + c.id + " (" + c.queue + ", attempt " + c.attempt + ", since " + when(c.started_at) + ")";
          ul.appendChild(li);
        }
        cell(tr, "Current tasks", ul);
      }
      cell(tr, "Last beat", when(w.heartbeat_at));
      // Only what makes sense: a running worker is stopped or restarted,
      // a stopped one started.
      cell(tr, "Actions", buttons(w.state === "running" ? [
        ["Stop", () => manageWorker("stop", w.worker_id), "stop"],
        ["Restart", () => manageWorker("restart", w.worker_id), "restart"],
      ] : [
        ["Start", () => manageWorker("start", w.worker_id), "start"],
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

  function renderTaskList(queues, list) {
    const sel = $("task-queue");
    const names = queues.map((q) => q.name);
    if (!names.includes(selected.queue)) selected.queue = names[0] || "";
    if (sel.dataset.names !== names.join(",")) {
      sel.replaceChildren();
      for (const n of names) {
        const o = document.createElement("option");
        o.value = n;
        o.textContent = n;
        sel.appendChild(o);
      }
      sel.dataset.names = names.join(",");
    }
    sel.value = selected.queue;
    const q = queues.find((x) => x.name === selected.queue) || {};
    const states = $("task-states");
    states.replaceChildren();
    for (const st of STATES) {
      const b = document.createElement("button");
      b.type = "button";
      b.dataset.state = st;
      b.setAttribute("aria-pressed", String(st === selected.state));
      b.textContent = st + " (" + (q[st] || 0) + ")";
      b.addEventListener("click", () => { selected.state = st; refresh(); });
      states.appendChild(b);
    }
    const bulk = [];
    for (const [name, a] of Object.entries(TASK_ACTIONS)) {
      if (!a.from.includes(selected.state) || !(q[selected.state] > 0)) continue;
      const label = a.label(selected.state) + " all " + q[selected.state];
      const fn = () => manageBulk(name, selected.queue, selected.state);
      const question = label + " " + selected.state + " tasks of " + selected.queue + "?";
      bulk.push([label, name === "run" ? fn : confirmed(question, fn), "bulk-" + name]);
    }
    $("bulk").replaceChildren(buttons(bulk));
    const body = $("task-list");
    body.replaceChildren();
    $("no-tasks").hidden = list.length > 0;
    for (const t of list) {
      const tr = document.createElement("tr");
      tr.dataset.task = t.id;
      cell(tr, "Task", t.id);
      cell(tr, "Type", t.type);
      const code = document.createElement("code");
      code.textContent = t.payload || "–";
      cell(tr, "Payload", code).className = "payload";
      cell(tr, "Last error", t.last_error || "–").className = "lasterr";
      cell(tr, "Retries", t.retried + " / " + t.max_retry);
      cell(tr, "When", when(t.completed_at || t.next_process_at || t.last_failed_at));
      const acts = [];
      for (const name of t.actions || []) {
        const a = TASK_ACTIONS[name];
        if (!a) continue;
        acts.push([a.label(t.state), () => manageTask(name, t), name]);
      }
      cell(tr, "Actions", acts.length ? buttons(acts) : "–");
      body.appendChild(tr);
    }
  }

  function renderChart(points) {
    const svg = $("chart");
    for (const el of Array.from(svg.querySelectorAll("rect"))) el.remove();
    const now = Math.floor(Date.now() / 60000);
    const byMin = new Map(points.map((p) => [Math.floor(new Date(p.at).getTime() / 60000), p]));
    const max = Math.max(1, ...points.map((p) => p.processed));
    const w = 600 / 60;
    let processed = 0, failed = 0;
    for (let i = 0; i < 60; i++) {
      const p = byMin.get(now - 59 + i);
      if (!p) continue;
      processed += p.processed;
      failed += p.failed;
      for (const [cls, v] of [["processed", p.processed], ["failed", p.failed]]) {
        if (!v) continue;
        const r = document.createElementNS("http://www.w3.org/2000/svg", "rect");
        const h = 150 * v / max;
        r.setAttribute("class", cls);
        r.setAttribute("x", String(i * w + (cls === "failed" ? w / 2 : 1)));
        r.setAttribute("width", String(w / 2 - 1));
        r.setAttribute("y", String(160 - h));
        r.setAttribute("height", String(h));
        svg.appendChild(r);
      }
    }
    $("chart-sum").textContent = "(" + processed + " attempts processed, " + failed + " attempts failed)";
  }

  function renderStats(s) {
    $("stat-total").textContent = String(s.total_tasks);
    $("stat-completed").textContent = String(s.completed_tasks);
    $("stat-failed").textContent = String(s.failed_tasks);
    $("stat-pending").textContent = String(s.pending_tasks);
    $("stat-archived").textContent = String(s.archived_tasks);
    $("stat-deleted").textContent = String(s.deleted_tasks);
    $("stat-rate").textContent = s.success_rate.toFixed(1) + " %";
  }

  let inflight = false, again = false;
  async function refresh() {
    // A refresh asked for while one runs (a click) runs right after it.
    if (inflight) { again = true; return; }
    inflight = true;
    try {
      const [qs, st, ws, ts, hs] = await Promise.all([
        api("/api/tasks/queue-status/?all=true"),
        api("/api/tasks/task-statistics/"),
        api("/api/tasks/workers/"),
        api("/api/tasks/recent/?limit=50"),
        api("/api/tasks/history/?minutes=60"),
      ]);
      queueRows = qs.data.queues;
      if (!queueRows.some((q) => q.name === selected.queue) && queueRows.length) selected.queue = queueRows[0].name;
      let list = [];
      if (selected.queue) {
        const path = "/api/tasks/tasks/?size=100&queue=" + encodeURIComponent(selected.queue) + "&state=" + encodeURIComponent(selected.state);
        list = (await api(path)).data.tasks;
      }
      renderQueues(queueRows);
      renderTaskList(queueRows, list);
      renderChart(hs.data.points);
      renderStats(st.data);
      renderWorkers(ws.data.workers);
      renderTasks(ts.data.tasks);
      $("updated").textContent = "updated " + new Date().toLocaleTimeString();
      document.body.dataset.polls = String(Number(document.body.dataset.polls || 0) + 1);
    } catch (e) {
      showError("Refresh failed: " + e.message);
    } finally {
      inflight = false;
      if (again) { again = false; refresh(); }
    }
  }

  function showTab(name) {
    for (const o of document.querySelectorAll("nav button")) {
      o.setAttribute("aria-selected", String(o.dataset.tab === name));
      $("tab-" + o.dataset.tab).hidden = o.dataset.tab !== name;
    }
  }
  for (const b of document.querySelectorAll("nav button")) {
    b.addEventListener("click", () => showTab(b.dataset.tab));
  }
  $("task-queue").addEventListener("change", (e) => { selected.queue = e.target.value; refresh(); });
  refresh();
  setInterval(refresh, POLL_MS);
})();
