/* The lineage site's behaviour: search (every page), the graph explorer (index.html), the evolution
   view (evolution.html), and opening what a link points at (a column's lineage, a version's row).
   Everything it needs is in data.js (window.LINEAGE): no fetch, so pages work from file://. */
"use strict";

(function () {
  const data = window.LINEAGE;
  const root = document.body.dataset.root || "";
  const escape = (text) => String(text).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);

  // ---- search ---------------------------------------------------------------------------------
  // Rank: exact name, name prefix, a word of the name, anywhere in the name, an identity (URN,
  // OpenLineage name, Asset URI, run id), the description.
  function score(entry, query) {
    const name = entry.n.toLowerCase();
    if (name === query) return 0;
    if (name.startsWith(query)) return 1;
    if (name.split(/[._\s/]/).some((word) => word.startsWith(query))) return 2;
    if (name.includes(query)) return 3;
    if (entry.a.some((alias) => alias.toLowerCase().includes(query))) return 4;
    if ((entry.d || "").toLowerCase().includes(query)) return 5;
    return -1;
  }

  function searchResults(text) {
    const query = text.trim().toLowerCase();
    if (!query) return [];
    return data.search
      .map((entry) => [score(entry, query), entry])
      .filter(([rank]) => rank >= 0)
      .sort((a, b) => a[0] - b[0] || a[1].n.length - b[1].n.length || a[1].n.localeCompare(b[1].n))
      .slice(0, 25)
      .map(([, entry]) => entry);
  }

  function setUpSearch() {
    const input = document.getElementById("search");
    const list = document.getElementById("search-results");
    let shown = [];
    let active = 0;
    function render() {
      list.innerHTML = "";
      shown.forEach((entry, i) => {
        const item = document.createElement("li");
        if (i === active) item.className = "active";
        const a = document.createElement("a");
        a.href = root + entry.p;
        a.textContent = entry.n;
        const kind = document.createElement("span");
        kind.className = "kind";
        kind.textContent = entry.k;
        a.appendChild(kind);
        if (entry.d) {
          const doc = document.createElement("span");
          doc.className = "doc";
          doc.textContent = entry.d;
          a.appendChild(doc);
        }
        item.appendChild(a);
        list.appendChild(item);
      });
      list.hidden = shown.length === 0;
    }
    input.addEventListener("input", () => {
      shown = searchResults(input.value);
      active = 0;
      render();
    });
    input.addEventListener("keydown", (event) => {
      if (event.key === "ArrowDown" || event.key === "ArrowUp") {
        active = (active + (event.key === "ArrowDown" ? 1 : shown.length - 1)) % Math.max(shown.length, 1);
        render();
        event.preventDefault();
      } else if (event.key === "Enter" && shown[active]) {
        window.location.href = root + shown[active].p;
      } else if (event.key === "Escape") {
        list.hidden = true;
      }
    });
    document.addEventListener("click", (event) => {
      if (!event.target.closest(".search")) list.hidden = true;
    });
  }

  // ---- what a link points at: open a column's lineage, mark a version's row -------------------
  function showTarget() {
    const id = decodeURIComponent(window.location.hash.slice(1));
    if (!id || id.includes("=")) return;
    const target = document.getElementById(id);
    if (!target) return;
    if (target.tagName === "DETAILS") target.open = true;
    document.querySelectorAll(".target").forEach((el) => el.classList.remove("target"));
    target.classList.add("target");
    target.scrollIntoView({ block: "center" });
  }

  // ---- a graph drawn by Graphviz, with the data that says what each drawn node and edge is ----
  function indexGraph(graph) {
    const ups = graph.nodes.map(() => []);
    const downs = graph.nodes.map(() => []);
    graph.edges.forEach(([source, target], i) => {
      downs[source].push([target, i]);
      ups[target].push([source, i]);
    });
    return { ups, downs };
  }

  // Nodes reached walking one way, each with its degree (steps away), to `depth` steps (0: all).
  function walk(start, next, depth) {
    const degree = new Map([[start, 0]]);
    const edges = new Set();
    let frontier = [start];
    for (let step = 1; frontier.length && (depth === 0 || step <= depth); step++) {
      const after = [];
      frontier.forEach((node) =>
        next[node].forEach(([other, edge]) => {
          edges.add(edge);
          if (!degree.has(other)) {
            degree.set(other, step);
            after.push(other);
          }
        })
      );
      frontier = after;
    }
    degree.delete(start);
    return { degree, edges };
  }

  function zoomable(container) {
    const svg = container.querySelector("svg");
    const width = parseFloat(svg.getAttribute("width")) * (4 / 3); // Graphviz sizes in pt
    const height = parseFloat(svg.getAttribute("height")) * (4 / 3);
    const minimum = 0.6; // below this the labels stop being legible: scroll instead
    let scale = 1;
    function apply(value) {
      scale = Math.max(0.2, Math.min(2, value));
      svg.style.width = `${width * scale}px`;
      svg.style.height = `${height * scale}px`;
    }
    function fit() {
      apply(Math.max(minimum, Math.min(1, (container.clientWidth - 4) / width)));
    }
    fit();
    return {
      fit,
      by: (factor) => apply(scale * factor),
    };
  }

  function setUpExplorer() {
    const container = document.getElementById("graph");
    const graph = data.graph;
    const { ups, downs } = indexGraph(graph);
    const nodeEls = graph.nodes.map((node) => document.getElementById(node.id));
    const edgeEls = graph.edges.map((edge) => document.getElementById(edge[3]));
    const byId = new Map(graph.nodes.map((node, i) => [node.id, i]));
    const depthSelect = document.getElementById("depth");
    const panel = document.getElementById("panel");
    let selected = null;

    function reset() {
      nodeEls.concat(edgeEls).forEach((el) => el && el.classList.remove("dim", "up", "down", "selected"));
    }

    function mark(nodes, edges) {
      nodeEls.forEach((el, i) => el && el.classList.toggle("dim", !nodes.has(i)));
      edgeEls.forEach((el, i) => el && el.classList.toggle("dim", !edges.has(i)));
    }

    function fillDegrees(list, degree) {
      const kinds = new Set([...panel.querySelectorAll(".filters input:checked")].map((box) => box.value));
      list.innerHTML = "";
      [...degree.entries()]
        .filter(([node]) => kinds.has(graph.nodes[node].kind))
        .sort((a, b) => a[1] - b[1] || graph.nodes[a[0]].name.localeCompare(graph.nodes[b[0]].name))
        .forEach(([node, steps]) => {
          const item = document.createElement("li");
          const a = document.createElement("a");
          a.href = root + graph.nodes[node].page;
          a.textContent = graph.nodes[node].name;
          const away = document.createElement("span");
          away.className = "degree";
          away.textContent = ` · ${steps} step${steps > 1 ? "s" : ""}`;
          item.append(a, away);
          list.appendChild(item);
        });
      if (!list.children.length) list.innerHTML = "<li class='empty'>nothing</li>";
    }

    function select(index) {
      selected = index;
      reset();
      const depth = Number(depthSelect.value);
      const up = walk(index, ups, depth);
      const down = walk(index, downs, depth);
      mark(new Set([index, ...up.degree.keys(), ...down.degree.keys()]), new Set([...up.edges, ...down.edges]));
      nodeEls[index].classList.add("selected");
      up.degree.forEach((_, node) => nodeEls[node].classList.add("up"));
      down.degree.forEach((_, node) => nodeEls[node].classList.add("down"));
      up.edges.forEach((edge) => edgeEls[edge].classList.add("up"));
      down.edges.forEach((edge) => edgeEls[edge].classList.add("down"));
      const node = graph.nodes[index];
      panel.hidden = false;
      document.getElementById("panel-title").textContent = node.name;
      document.getElementById("panel-label").textContent =
        node.label + (node.state ? ` · last run ${node.state}` : "");
      document.getElementById("panel-open").href = root + node.page;
      fillDegrees(document.getElementById("panel-up"), up.degree);
      fillDegrees(document.getElementById("panel-down"), down.degree);
    }

    // dbt's selection syntax: NAME, +NAME, NAME+, 2+NAME+1; and tool:TOOL, kind:KIND
    function selection(text) {
      const nodes = new Set();
      text.split(/\s+/).filter(Boolean).forEach((token) => {
        const field = token.match(/^(tool|kind):(.+)$/i);
        if (field) {
          graph.nodes.forEach((node, i) => {
            if (String(node[field[1].toLowerCase()]).toLowerCase() === field[2].toLowerCase()) nodes.add(i);
          });
          return;
        }
        const parts = token.match(/^(?:(\d*)\+)?([^+]+?)(?:\+(\d*))?$/);
        if (!parts) return;
        const name = parts[2].toLowerCase();
        graph.nodes.forEach((node, i) => {
          if (node.name.toLowerCase() !== name && !node.name.toLowerCase().endsWith("." + name) && node.urn !== parts[2]) return;
          nodes.add(i);
          if (token.match(/^\d*\+/)) walk(i, ups, Number(parts[1] || 0)).degree.forEach((_, n) => nodes.add(n));
          if (token.match(/\+\d*$/)) walk(i, downs, Number(parts[3] || 0)).degree.forEach((_, n) => nodes.add(n));
        });
      });
      return nodes;
    }

    function applySelection(text) {
      reset();
      panel.hidden = true;
      if (!text.trim()) return;
      const nodes = selection(text);
      const edges = new Set(graph.edges.map((edge, i) => i).filter((i) => nodes.has(graph.edges[i][0]) && nodes.has(graph.edges[i][1])));
      mark(nodes, edges);
    }

    container.addEventListener("click", (event) => {
      const el = event.target.closest("g.node");
      if (!el || !byId.has(el.id)) return;
      event.preventDefault(); // a click selects; a double click (or the panel's link) opens the page
      select(byId.get(el.id));
    });
    container.addEventListener("dblclick", (event) => {
      const el = event.target.closest("g.node");
      if (el && byId.has(el.id)) window.location.href = root + graph.nodes[byId.get(el.id)].page;
    });
    depthSelect.addEventListener("change", () => selected !== null && select(selected));
    panel.querySelectorAll(".filters input").forEach((box) =>
      box.addEventListener("change", () => selected !== null && select(selected))
    );
    const selectInput = document.getElementById("select");
    selectInput.addEventListener("input", () => applySelection(selectInput.value));
    document.getElementById("clear").addEventListener("click", () => {
      selectInput.value = "";
      selected = null;
      reset();
      panel.hidden = true;
    });
    const zoom = zoomable(container);
    document.getElementById("zoom-in").addEventListener("click", () => zoom.by(1.25));
    document.getElementById("zoom-out").addEventListener("click", () => zoom.by(0.8));
    document.getElementById("zoom-fit").addEventListener("click", () => zoom.fit());

    // index.html#node=<name or URN> opens with that node selected (the pages link here)
    const wanted = new URLSearchParams(window.location.hash.slice(1)).get("node");
    if (wanted) {
      const index = graph.nodes.findIndex((node) => node.name === wanted || node.urn === wanted);
      if (index >= 0) select(index);
    }
  }

  // ---- evolution ----------------------------------------------------------------------------------
  function setUpEvolution() {
    const evolution = data.evolution;
    const container = document.getElementById("evolution-graph");
    const nodeEls = evolution.nodes.map((node) => document.getElementById(node.id));
    const edgeEls = evolution.edges.map((edge) => document.getElementById(edge[3]));
    const runs = new Map(evolution.runs.map((run) => [run.id, run]));
    const sides = ["from", "to"].map((side) => ({
      run: document.getElementById(`${side}-run`),
      time: document.getElementById(`${side}-time`),
    }));
    sides.forEach((side, i) => {
      if (evolution.defaults[i]) side.run.value = evolution.defaults[i];
    });

    // The state a side shows: at its time (UTC) if one is given, else at the end of its run.
    function stateOf(side) {
      if (side.time.value) {
        const moment = Date.parse(side.time.value + "Z");
        let found = -1;
        evolution.states.forEach((state, i) => {
          if (Date.parse(state.at) <= moment) found = i;
        });
        return found;
      }
      const run = runs.get(side.run.value);
      return run ? run.state : -1;
    }

    function edgesAt(state) {
      return new Set(state >= 0 ? evolution.states[state].edges : []);
    }

    function nodesOf(edges) {
      const nodes = new Set();
      edges.forEach((edge) => {
        nodes.add(evolution.edges[edge][0]);
        nodes.add(evolution.edges[edge][1]);
      });
      return nodes;
    }

    function describe(edge) {
      const [source, target, kind] = evolution.edges[edge];
      return `${evolution.nodes[source].name} → ${evolution.nodes[target].name} (${kind})`;
    }

    function list(title, cls, edges) {
      const items = [...edges].map(describe).sort();
      const body = items.length
        ? items.map((text) => `<li class="${cls}" data-edge="${escape(text)}">${escape(text)}</li>`).join("")
        : "<li class='empty'>none</li>";
      return `<h3>${title} (${items.length})</h3><ul class="${cls}-edges">${body}</ul>`;
    }

    function parameters() {
      const [a, b] = sides.map((side) => (side.time.value ? null : runs.get(side.run.value)));
      if (!a || !b) return "";
      const keys = [...new Set([...Object.keys(a.parameters), ...Object.keys(b.parameters)])].sort();
      const changed = keys.filter((key) => a.parameters[key] !== b.parameters[key]);
      const text = changed.map((key) => `${key}: ${a.parameters[key] ?? "–"} → ${b.parameters[key] ?? "–"}`);
      return `<p>Parameters: ${text.length ? escape(text.join("; ")) : "the same"}</p>`;
    }

    function update() {
      const [before, after] = sides.map((side) => edgesAt(stateOf(side)));
      const added = new Set([...after].filter((edge) => !before.has(edge)));
      const removed = new Set([...before].filter((edge) => !after.has(edge)));
      edgeEls.forEach((el, i) => {
        el.classList.toggle("added", added.has(i));
        el.classList.toggle("removed", removed.has(i));
        el.classList.toggle("absent", !before.has(i) && !after.has(i));
      });
      const [nodesBefore, nodesAfter] = [nodesOf(before), nodesOf(after)];
      nodeEls.forEach((el, i) => {
        el.classList.toggle("added", nodesAfter.has(i) && !nodesBefore.has(i));
        el.classList.toggle("removed", nodesBefore.has(i) && !nodesAfter.has(i));
        el.classList.toggle("absent", !nodesBefore.has(i) && !nodesAfter.has(i));
      });
      document.getElementById("evolution-summary").innerHTML =
        parameters() + list("Added", "added", added) + list("Removed", "removed", removed);
    }

    sides.forEach((side) => {
      side.run.addEventListener("change", () => {
        side.time.value = "";
        update();
      });
      side.time.addEventListener("change", update);
    });
    zoomable(container);
    update();
  }

  setUpSearch();
  if (document.getElementById("graph") && data.graph) setUpExplorer();
  if (document.getElementById("evolution-graph")) setUpEvolution();
  window.addEventListener("hashchange", showTarget);
  showTarget();
})();
