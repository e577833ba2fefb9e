// Cairn's API reference page: renders /openapi.json (served by the same
// binary) with no library and nothing from the network but this server.
// The API key typed for "Try it" lives in this page's memory only: it is
// never written to storage or put in a URL.
"use strict";

const METHODS = ["get", "post", "put", "patch", "delete"];

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === "class") node.className = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

/** A schema with `$ref`s resolved (cycles stop at the second visit). */
function resolve(doc, schema, seen = new Set()) {
  if (Array.isArray(schema)) return schema.map((s) => resolve(doc, s, seen));
  if (!schema || typeof schema !== "object") return schema;
  if (typeof schema.$ref === "string") {
    const ref = schema.$ref;
    if (seen.has(ref)) return { $ref: ref };
    const target = ref.replace(/^#\//, "").split("/").reduce((at, part) => (at ? at[part] : undefined), doc);
    return resolve(doc, target, new Set([...seen, ref]));
  }
  const out = {};
  for (const [key, value] of Object.entries(schema)) out[key] = resolve(doc, value, seen);
  return out;
}

function anchor(method, path) {
  return `op-${method}-${path.replace(/[^A-Za-z0-9]+/g, "-")}`;
}

function parametersTable(parameters) {
  if (!parameters || parameters.length === 0) return null;
  const rows = parameters.map((p) =>
    el("tr", {},
      el("td", {}, el("code", {}, p.name)),
      el("td", {}, p.in),
      el("td", {}, p.required ? "required" : "optional"),
      el("td", {}, el("code", {}, JSON.stringify(p.schema || {}))),
      el("td", {}, p.description || "")));
  return el("table", {},
    el("tr", {}, el("th", {}, "name"), el("th", {}, "in"), el("th", {}, ""), el("th", {}, "schema"), el("th", {}, "meaning")),
    ...rows);
}

function tryIt(method, path, operation) {
  const parameters = (operation.parameters || []).filter((p) => p.in === "path" || p.in === "query");
  const inputs = parameters.map((p) => {
    const input = el("input", { "data-name": p.name, "data-in": p.in, placeholder: p.required ? "required" : "optional" });
    return { p, input, row: el("label", {}, `${p.name} (${p.in}) `, input, el("br", {})) };
  });
  const hasBody = Boolean(operation.requestBody);
  const contentType = hasBody ? Object.keys(operation.requestBody.content || {})[0] : null;
  const body = hasBody ? el("textarea", { "aria-label": "request body" }) : null;
  const output = el("pre", {}, "");
  const send = el("button", { type: "button" }, "Send");
  send.addEventListener("click", async () => {
    let url = path;
    const query = new URLSearchParams();
    for (const { p, input } of inputs) {
      if (!input.value) continue;
      if (p.in === "path") url = url.replace(`{${p.name}}`, encodeURIComponent(input.value));
      else query.append(p.name, input.value);
    }
    if (query.toString()) url += `?${query}`;
    const headers = {};
    const key = document.getElementById("key").value.trim();
    if (key) headers.Authorization = `Bearer ${key}`;
    if (hasBody) headers["Content-Type"] = contentType;
    output.textContent = "…";
    try {
      const response = await fetch(url, { method: method.toUpperCase(), headers, body: hasBody ? body.value : undefined });
      const text = await response.text();
      let shown = text;
      try { shown = JSON.stringify(JSON.parse(text), null, 2); } catch (_) { /* not JSON: as it came */ }
      output.className = response.ok ? "status-ok" : "status-err";
      output.textContent = `${response.status} ${response.statusText}\n\n${shown}`;
    } catch (error) {
      output.className = "status-err";
      output.textContent = String(error);
    }
  });
  return el("details", {}, el("summary", {}, "Try it"), ...inputs.map((i) => i.row), body, send, output);
}

function render(doc) {
  const toc = document.getElementById("toc");
  const list = document.getElementById("operations");
  toc.replaceChildren();
  list.replaceChildren();
  const filter = document.getElementById("filter").value.trim().toLowerCase();
  for (const [path, item] of Object.entries(doc.paths || {})) {
    for (const method of METHODS) {
      const operation = item[method];
      if (!operation) continue;
      const words = `${method} ${path} ${operation.summary || ""} ${operation.description || ""}`.toLowerCase();
      if (filter && !words.includes(filter)) continue;
      const id = anchor(method, path);
      toc.append(el("a", { href: `#${id}` }, el("span", { class: `method ${method}` }, method.toUpperCase()), path));
      const isPublic = Array.isArray(operation.security) && operation.security.length === 0;
      const body = operation.requestBody
        ? Object.entries(operation.requestBody.content || {}).map(([type, media]) =>
          el("div", {}, el("strong", {}, `Request body (${type})`),
            el("pre", {}, JSON.stringify(resolve(doc, media.schema || {}), null, 2))))
        : [];
      const responses = Object.entries(operation.responses || {}).map(([status, response]) => {
        const resolved = resolve(doc, response);
        const types = Object.keys(resolved.content || {}).join(", ");
        return el("tr", {}, el("td", {}, status), el("td", {}, resolved.description || ""), el("td", {}, types));
      });
      list.append(el("article", { id },
        el("h2", {}, el("span", { class: `method ${method}` }, method.toUpperCase()), path,
          isPublic ? el("span", { class: "public" }, "public") : null),
        el("div", {},
          el("p", {}, el("strong", {}, operation.summary || "")),
          operation.description ? el("p", {}, operation.description) : null,
          parametersTable(operation.parameters),
          ...body,
          el("table", {}, el("tr", {}, el("th", {}, "status"), el("th", {}, "meaning"), el("th", {}, "content")), ...responses),
          tryIt(method, path, operation))));
    }
  }
}

async function main() {
  const list = document.getElementById("operations");
  let doc;
  try {
    const response = await fetch("/openapi.json");
    doc = await response.json();
  } catch (error) {
    list.textContent = `Could not load /openapi.json: ${error}`;
    return;
  }
  document.title = `${doc.info.title} API ${doc.info.version}`;
  render(doc);
  document.getElementById("filter").addEventListener("input", () => render(doc));
}

main();
