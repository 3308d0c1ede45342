// tenure serve's page, kept live from /v1/events (server-sent events).
// The HTML the server sends is the whole page but the chart; this script
// redraws it at every event and draws the chart. Plain JavaScript, no
// build step.
"use strict";

(function () {
  const body = document.body;
  const page = body.dataset.page;

  function el(tag, attributes, children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) {
      if (value !== undefined && value !== null) node.setAttribute(name, value);
    }
    for (const child of children || []) {
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function lagText(lag) {
    return lag === null || lag === undefined ? "\u2013" : String(lag);
  }

  function colour(index) {
    return "hsl(" + ((index * 137.508) % 360).toFixed(0) + " 65% 55%)";
  }

  function statusBadge(status) {
    return el("span", { class: "status s-" + status }, [status]);
  }

  function rfc3339(ms) {
    return new Date(ms).toISOString().replace(/\.\d{3}Z$/, "Z");
  }

  function timelineText(entry) {
    const partition = entry.partition || "?";
    const token = entry.token !== null && entry.token !== undefined ? " (token " + entry.token + ")" : "";
    let what;
    switch (entry.kind) {
      case "joined": what = entry.member + " joined"; break;
      case "left": what = entry.member + " left"; break;
      case "claimed": what = entry.member + " claimed " + partition + token; break;
      case "released": what = entry.member + " released " + partition; break;
      case "handoff": what = partition + " moved from " + (entry.from || "?") + " to " + entry.member + token; break;
      default: what = entry.member + " " + partition;
    }
    return rfc3339(entry.at_ms) + " " + what;
  }

  function replaceBody(id, rows) {
    const table = document.getElementById(id);
    if (!table) return;
    const tbody = table.tBodies[0];
    tbody.replaceChildren(...rows);
  }

  function drawIndex(summary) {
    replaceBody("groups", summary.groups.map((g) =>
      el("tr", { "data-group": g.group }, [
        el("td", {}, [el("a", { href: "/groups/" + encodeURIComponent(g.group) }, [g.group])]),
        el("td", {}, [statusBadge(g.status)]),
        el("td", {}, [g.members]),
        el("td", {}, [g.partitions]),
        el("td", {}, [g.unowned]),
        el("td", {}, [lagText(g.total_lag)]),
        el("td", {}, [lagText(g.max_lag)]),
        el("td", {}, [g.reason]),
      ])));
  }

  function drawMap(group) {
    const map = document.getElementById("map");
    const owners = group.members.map((m, i) => ({ id: m.id, colour: colour(i) }));
    owners.push({ id: null, colour: "transparent" });
    const blocks = [];
    for (const owner of owners) {
      const cells = group.partitions
        .filter((p) => (p.owner || null) === owner.id)
        .map((p) => el("span", {
          class: "cell s-" + p.status,
          "data-partition": p.topic + "/" + p.partition,
          title: p.topic + "/" + p.partition + (p.token !== null && p.token !== undefined ? " \u00b7 token " + p.token : " \u00b7 no owner"),
          style: "background:" + owner.colour,
        }, [p.partition]));
      if (owner.id !== null || cells.length > 0) {
        blocks.push(el("div", { class: "owner", "data-member": owner.id || "" },
          [el("h3", {}, [owner.id || "no owner"]), ...cells]));
      }
    }
    map.replaceChildren(...blocks);
  }

  function drawChart(group) {
    const svg = document.getElementById("chart");
    if (!svg) return;
    const ns = "http://www.w3.org/2000/svg";
    const width = 600, height = 160, pad = 24;
    let maxLag = 1, first = Infinity, last = -Infinity;
    for (const p of group.partitions) {
      for (const s of p.window) {
        const lag = Math.max(0, s.log_end - (s.committed === null ? s.log_start : s.committed));
        maxLag = Math.max(maxLag, lag);
        first = Math.min(first, s.at_ms);
        last = Math.max(last, s.at_ms);
      }
    }
    const span = Math.max(1, last - first);
    const owners = new Map(group.members.map((m, i) => [m.id, colour(i)]));
    const lines = [];
    for (const p of group.partitions) {
      if (p.window.length === 0) continue;
      const points = p.window.map((s) => {
        const lag = Math.max(0, s.log_end - (s.committed === null ? s.log_start : s.committed));
        const x = pad + ((s.at_ms - first) / span) * (width - 2 * pad);
        const y = height - pad - (lag / maxLag) * (height - 2 * pad);
        return x.toFixed(1) + "," + y.toFixed(1);
      }).join(" ");
      const line = document.createElementNS(ns, "polyline");
      line.setAttribute("points", points);
      line.setAttribute("fill", "none");
      line.setAttribute("stroke", owners.get(p.owner) || "#888");
      line.setAttribute("data-partition", p.topic + "/" + p.partition);
      const title = document.createElementNS(ns, "title");
      title.textContent = p.topic + "/" + p.partition + " lag " + lagText(p.lag);
      line.append(title);
      lines.push(line);
    }
    const axis = document.createElementNS(ns, "text");
    axis.setAttribute("x", "4");
    axis.setAttribute("y", "14");
    axis.textContent = "max lag " + maxLag;
    svg.replaceChildren(axis, ...lines);
  }

  function drawGroup(group) {
    const status = document.getElementById("status");
    status.className = "status s-" + group.status;
    status.textContent = group.status;
    document.getElementById("reason").textContent = group.reason;
    replaceBody("members", group.members.map((m, i) =>
      el("tr", { "data-member": m.id }, [
        el("td", {}, [el("span", { class: "swatch", style: "background:" + colour(i) })]),
        el("td", {}, [m.id]),
        el("td", {}, [m.host || "\u2013"]),
        el("td", {}, [m.strategy]),
        el("td", {}, [m.subscription]),
        el("td", {}, [m.partitions]),
      ])));
    drawMap(group);
    drawChart(group);
    replaceBody("partitions", group.partitions.map((p) =>
      el("tr", {}, [
        el("td", {}, [p.topic + "/" + p.partition]),
        el("td", {}, [p.owner || "\u2013"]),
        el("td", {}, [p.token === null ? "\u2013" : p.token]),
        el("td", {}, [p.committed === null ? "\u2013" : p.committed]),
        el("td", {}, [p.log_end === null ? "\u2013" : p.log_end]),
        el("td", {}, [lagText(p.lag)]),
        el("td", {}, [statusBadge(p.status)]),
        el("td", {}, [p.reason]),
      ])));
    const timeline = document.getElementById("timeline");
    timeline.replaceChildren(...group.timeline.slice(-100).reverse().map((e) => el("li", {}, [timelineText(e)])));
    body.dataset.updated = String(Date.now());
  }

  const url = page === "group"
    ? "/v1/events?group=" + encodeURIComponent(body.dataset.group)
    : "/v1/events";
  const events = new EventSource(url);
  events.addEventListener("summary", (event) => drawIndex(JSON.parse(event.data)));
  events.addEventListener("group", (event) => drawGroup(JSON.parse(event.data)));
  events.addEventListener("missing", () => {
    const status = document.getElementById("status");
    if (status) {
      status.className = "status s-ERROR";
      status.textContent = "GONE";
    }
  });
  events.addEventListener("open", () => body.classList.remove("disconnected"));
  events.addEventListener("error", () => body.classList.add("disconnected"));
})();
