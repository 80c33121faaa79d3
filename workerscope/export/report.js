(function () {
"use strict";
const D = JSON.parse(document.getElementById("ws-data").textContent);
const LEFT = 210, RIGHT = 14, AXIS = 22, BG_ALT = "#f3f5f8", RED = "#d00000";
const FONT = "10px system-ui,sans-serif", BOLD = "bold 11px system-ui,sans-serif";
const body = document.body, tip = document.getElementById("tip");
const stack = document.getElementById("stack"), cursorLine = document.getElementById("cursor");
const report = window.__wsError || function () {};

// ---- spans: columns -> typed arrays. Flags: 1 error, 2 job, 4 a job its worker died in,
// 8 still running, 16 cut short (open when its process died: it ends at the death) ----
const S = D.spans, N = S.n.length, W = D.workers, NW = W.length;
// W[w]: [id, status, died, straggler, lanes, host, pid, last event (us), notes,
//        how it died ("OOM-killed", "killed (SIGKILL)", or ""), what the sidecar read (lines)]
const sw = Int32Array.from(S.w), sd = Int32Array.from(S.d), sn = Int32Array.from(S.n);
const sf = Int32Array.from(S.f), sh = Int32Array.from(S.h);
const ss = new Float64Array(N), se = new Float64Array(N);
{
  let acc = 0;
  for (let i = 0; i < N; i++) { acc += S.t[i]; ss[i] = acc; se[i] = acc + S.l[i]; }
}
// Lanes: S.d is each span's lane in its worker's band (lanes.py: its depth, unless it ran beside
// other spans; then S.e holds the depths); each lane's spans in start order, for hit tests.
const laneOff = new Int32Array(NW + 1);
for (let w = 0; w < NW; w++) laneOff[w + 1] = laneOff[w] + W[w][4];
const NL = laneOff[NW];
const laneStart = new Int32Array(NL + 1), laneIdx = new Int32Array(N);
const laneMax = new Float64Array(NL);
for (let i = 0; i < N; i++) laneStart[laneOff[sw[i]] + sd[i] + 1]++;
for (let l = 0; l < NL; l++) laneStart[l + 1] += laneStart[l];
{
  const next = laneStart.slice(0, NL);
  for (let i = 0; i < N; i++) {
    const l = laneOff[sw[i]] + sd[i];
    laneIdx[next[l]++] = i;
    laneMax[l] = Math.max(laneMax[l], se[i] - ss[i]);
  }
}
const errOf = new Map(D.errors), attrOf = new Map(), jobDeath = new Map(D.jobDeaths);
{
  let i = 0;
  D.attrs.i.forEach((d, j) => { i += d; attrOf.set(i, D.attrs.texts[D.attrs.x[j]]); });
}
let avals = null;  // the attribution columns, split on the first hover
function attrCode(j, i) {
  if (!avals) avals = D.avals.map(col => col.split(","));
  const s = avals[j][i];
  return s === "" || s === undefined ? null : +s;
}
const color = D.hues.map(h => "hsl(" + h + ",58%,62%)");
const jobColor = D.hues.map(h => "hsl(" + h + ",35%,83%)");
const B = D.bins, NB = B.c.length;
// Line colours spread round the wheel, skipping the reds that mean an error or a death.
const seriesColor = c => {
  if (c < 0) return "#8a94a6";  // "others": what a per-process breakdown sums
  let h = (210 + c * 137.508) % 360;
  if (h > 340 || h < 20) h = (h + 40) % 360;
  return "hsl(" + h.toFixed(1) + ",65%,42%)";
};
const endOf = i => (sf[i] & 8) ? Math.max(se[i], W[sw[i]][7]) : se[i];

// ---- the view (us since the origin), shared by every canvas ----
let v0 = D.t0, v1 = D.t1;

// ---- formatting ----
function fmtDur(us) {
  if (us < 1) return (us * 1000).toFixed(0) + " ns";
  if (us < 1000) return +us.toPrecision(3) + " µs";
  if (us < 1e6) return +(us / 1e3).toPrecision(4) + " ms";
  return +(us / 1e6).toPrecision(4) + " s";
}
// Bytes as workerscope/units.py fmt_bytes writes them in the tables: binary units,
// three significant digits ("1.5 KiB"). Change both together.
function fmtBytes(b) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0, x = Math.abs(b);
  while (x >= 1024 && i < u.length - 1) { x /= 1024; i++; }
  return (b < 0 ? "-" : "") + (i ? +x.toPrecision(3) : x.toFixed(0)) + " " + u[i];
}
function fmtVal(v, unit) {
  if (unit === "%") return +v.toPrecision(3) + " %";
  if (unit === "B") return fmtBytes(v);
  if (unit === "B/s") return fmtBytes(v) + "/s";
  return String(v);
}
function fmtAttr(k, v) {
  if (/_bytes$/.test(k)) return fmtBytes(v);
  if (/_percent$/.test(k)) return v.toFixed(1) + " %";
  if (/_s$/.test(k)) return fmtDur(v * 1e6);
  return String(v);
}
function niceStep(raw) {
  const p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;
  return p * (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10);
}
// A step of about `raw` bytes for an axis up to ~3 x raw: 1, 2, 5, 10... of the largest unit
// that axis reaches, so its labels read "0.5 GiB, 1 GiB, 1.5 GiB", never "1000 MiB, 1.46 GiB".
function niceBytes(raw) {
  let u = 1;
  while (raw * 3 >= 1024 * u && u < 1024 ** 4) u *= 1024;
  return Math.max(1, u * niceStep(raw / u));  // whole bytes: an all-zero plot reads 0 B, 1 B
}
function tickLabel(t, step) {
  const dec = Math.max(0, Math.min(6, -Math.floor(Math.log10(step / 1e6) + 1e-9)));
  return (t / 1e6).toFixed(dec) + " s";
}

// ---- canvases ----
function setup(el, height, w) {
  const dpr = Math.max(1, window.devicePixelRatio || 1);
  el.width = Math.round(w * dpr);
  el.height = Math.round(height * dpr);
  el.style.width = w + "px";
  el.style.height = height + "px";
  const g = el.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  return { el: el, g: g, w: w, h: height, dpr: dpr };
}
const X = (c, t) => LEFT + (t - v0) * (c.w - LEFT - RIGHT) / (v1 - v0);
const T = (c, x) => v0 + (x - LEFT) * (v1 - v0) / (c.w - LEFT - RIGHT);

// Pixels the data primitives covered: counted before the backgrounds go in underneath.
function ink(c, x, y, w, h) {
  const d = c.dpr, img = c.g.getImageData(Math.round(x * d), Math.round(y * d),
    Math.max(1, Math.round(w * d)), Math.max(1, Math.round(h * d))).data;
  let n = 0;
  for (let i = 3; i < img.length; i += 4) if (img[i]) n++;
  return n;
}
function under(c, fn) {
  c.g.save();
  c.g.globalCompositeOperation = "destination-over";
  fn(c.g);
  c.g.restore();
}
// Vertical grid lines from y0 to y1 (labels null), or tick labels centred at y = labels.
function timeGrid(c, g, y0, y1, labels) {
  const step = niceStep((v1 - v0) / Math.max(2, (c.w - LEFT) / 110));
  g.font = FONT; g.textAlign = "center"; g.textBaseline = "middle";
  for (let t = Math.ceil(v0 / step) * step; t <= v1; t += step) {
    const x = Math.round(X(c, t)) + 0.5;
    if (x < LEFT || x > c.w - RIGHT) continue;
    if (labels === null) { g.fillStyle = "#e6e9ee"; g.fillRect(x - 0.5, y0, 1, y1 - y0); }
    else { g.fillStyle = "#555"; g.fillText(tickLabel(t, step), x, labels); }
  }
}
function clip(text, px, g) {
  if (g.measureText(text).width <= px) return text;
  let lo = 0, hi = text.length;
  while (lo < hi) {
    const m = (lo + hi + 1) >> 1;
    if (g.measureText(text.slice(0, m) + "…").width <= px) lo = m; else hi = m - 1;
  }
  return lo ? text.slice(0, lo) + "…" : "";
}

// ---- Gantt layout: a band per worker, its lanes one under the other ----
const laneH = Math.max(3, Math.min(16, Math.floor(1100 / Math.max(NL, 1))));
const bandY = new Float64Array(NW + 1), bandH = new Float64Array(NW);
const laneY = new Float64Array(NL);
{
  let y = AXIS + 4;
  for (let w = 0; w < NW; w++) {
    const lanes = W[w][4];
    bandH[w] = Math.max(lanes * laneH, 16);
    bandY[w] = y;
    const pad = (bandH[w] - lanes * laneH) / 2;
    for (let d = 0; d < lanes; d++) laneY[laneOff[w] + d] = y + pad + d * laneH;
    y += bandH[w] + 2;
  }
  bandY[NW] = y;
}
const ganttH = Math.max(bandY[NW] + 6, 80);

// A span cut short by its process's death: hatched, with a ragged (torn) right end where the
// death ended it. `end`: that end is in view.
function raggedEnd(g, p0, p1, y, lh, end) {
  const z = end ? Math.min(6, (p1 - p0) / 2) : 0, n = Math.max(2, Math.round(lh / 4));
  g.save();
  g.beginPath(); g.rect(p0, y, Math.max(p1 - p0, 0), lh); g.clip();
  g.strokeStyle = "rgba(29,35,48,.45)"; g.lineWidth = 1;
  g.beginPath();
  for (let x = p0 - lh; x < p1; x += 5) { g.moveTo(x, y + lh); g.lineTo(x + lh, y); }
  g.stroke();
  if (end) {
    const teeth = () => {
      g.beginPath(); g.moveTo(p1, y);
      for (let k = 0; k < n; k++) {
        g.lineTo(p1 - z, y + lh * (k + 0.5) / n); g.lineTo(p1, y + lh * (k + 1) / n);
      }
    };
    g.globalCompositeOperation = "destination-out";  // tear the end off
    teeth(); g.closePath(); g.fill();
    g.globalCompositeOperation = "source-over";
    g.strokeStyle = RED; g.lineWidth = 1.5; teeth(); g.stroke();
  }
  g.restore();
}
let gantt = null, stats = {};

function drawGantt(counting) {
  const c = gantt, g = c.g, x0 = LEFT, x1 = c.w - RIGHT;
  const k = (x1 - x0) / (v1 - v0), lh = Math.max(laneH - 1, 2);
  const lastBin = new Int32Array(NL).fill(-1), labels = [], cut = [];
  let drawn = 0, tiny = 0, bins = 0, inView = 0, style = "";
  const fill = s => { if (s !== style) { style = s; g.fillStyle = s; } };  // each set is parsed
  g.clearRect(0, 0, c.w, c.h);
  g.save();
  g.beginPath(); g.rect(x0, AXIS, x1 - x0, c.h - AXIS); g.clip();
  for (let i = 0; i < N; i++) {
    const a = ss[i];
    if (a > v1) break;  // spans are sorted by start
    const f = sf[i], b = endOf(i);
    if (b < v0) continue;
    inView++;
    const l = laneOff[sw[i]] + sd[i], y = laneY[l], col = (f & 2) ? jobColor[sn[i]] : color[sn[i]];
    let p0 = x0 + (a - v0) * k, p1 = x0 + (b - v0) * k;
    if (p1 - p0 < 0.5) {  // counted, and drawn as one 1-px bin per lane and pixel column
      tiny++;
      const px = Math.floor(Math.max(p0, x0));
      if (lastBin[l] !== px) {
        lastBin[l] = px; fill((f & 1) ? RED : col); g.fillRect(px, y, 1, lh); bins++;
      }
      continue;
    }
    p0 = Math.max(p0, x0 - 2); p1 = Math.min(p1, x1 + 2);
    fill(col);
    g.fillRect(p0, y, p1 - p0, lh);
    if (f & 8) {  // still running: hatched
      fill("rgba(255,255,255,.55)");
      for (let x = p0 + 4; x < p1; x += 8) g.fillRect(x, y, 3, lh);
    }
    if (f & 16) cut.push([p0, p1, y, b <= v1]);
    if (f & 5) {  // an error, or a killed job (dashed, with a cross where it ended)
      g.strokeStyle = RED; g.lineWidth = 1.5;
      if (f & 4) g.setLineDash([4, 2]);
      g.strokeRect(p0 + 0.75, y + 0.75, Math.max(p1 - p0 - 1.5, 0.5), lh - 1.5);
      g.setLineDash([]);
      if ((f & 4) && se[i] <= v1) labels.push([x0 + (se[i] - v0) * k, y + lh / 2, "✖", RED, 0]);
    }
    if (p1 - p0 > 30 && lh >= 9) {
      const lx = Math.max(p0, x0);
      labels.push([lx + 3, y + lh / 2, D.names[sn[i]], "#15181e", p1 - lx - 6]);
    }
    drawn++;
  }
  for (const [p0, p1, y, end] of cut) raggedEnd(g, p0, p1, y, lh, end);
  style = "";
  g.fillStyle = "#8a94a6";
  for (let j = 0; j < NB; j++) {  // spans summarised in Python (past MAX_SPANS)
    const a = B.t[j], b = a + B.l[j];
    if (b < v0 || a > v1) continue;
    const p0 = x0 + (a - v0) * k, p1 = x0 + (b - v0) * k;
    g.fillRect(p0, laneY[laneOff[B.w[j]] + B.d[j]], Math.max(p1 - p0, 1), lh);
    drawn++;
  }
  g.textBaseline = "middle";
  if (!NW) {
    g.fillStyle = "#8a94a6"; g.font = "13px system-ui,sans-serif"; g.textAlign = "center";
    g.fillText("no spans or workers in this timeline", (x0 + x1) / 2, (AXIS + c.h) / 2);
    drawn = 1;
  }
  for (const [x, y, text, col, room] of labels) {
    g.fillStyle = col;
    if (!room) {
      g.font = "bold 12px system-ui,sans-serif"; g.textAlign = "center"; g.fillText(text, x, y);
    } else {
      g.font = FONT; g.textAlign = "left";
      const s = clip(text, room, g);
      if (s) g.fillText(s, x, y);
    }
  }
  g.fillStyle = "#1d2330";
  for (const m of D.marks) {  // marks: small triangles on their worker's band
    if (m[1] < v0 || m[1] > v1) continue;
    const x = x0 + (m[1] - v0) * k, y = bandY[m[0]];
    g.beginPath(); g.moveTo(x - 3, y); g.lineTo(x + 3, y); g.lineTo(x, y + 5); g.fill();
  }
  g.fillStyle = RED;
  for (let w = 0; w < NW; w++) {  // a worker that died: a red bar where its timeline stops
    const x = x0 + (W[w][7] - v0) * k;
    if (W[w][2] && x >= x0 && x <= x1) g.fillRect(x - 1, bandY[w], 3, bandH[w]);
  }
  g.restore();
  if (counting) c.el.dataset.ink = String(ink(c, x0, AXIS, x1 - x0, c.h - AXIS));
  under(c, g => {
    timeGrid(c, g, AXIS, c.h, null);
    for (let w = 0; w < NW; w++) {
      g.fillStyle = W[w][2] ? "#fde8e8" : W[w][3] ? "#fff1d6" : (w % 2 ? BG_ALT : "#fff");
      g.fillRect(0, bandY[w] - 1, c.w, bandH[w] + 2);
    }
    g.fillStyle = "#fff"; g.fillRect(0, 0, c.w, c.h);
  });
  g.fillStyle = "#fff"; g.fillRect(0, 0, c.w, AXIS);
  timeGrid(c, g, 0, AXIS, AXIS / 2);
  g.fillStyle = "#c9ced6"; g.fillRect(LEFT - 1, 0, 1, c.h); g.fillRect(0, AXIS - 1, c.w, 1);
  g.textAlign = "left"; g.textBaseline = "middle";
  for (let w = 0; w < NW; w++) {  // worker labels, with what went wrong
    const cy = bandY[w] + Math.min(bandH[w], 16) / 2;
    let tag = !W[w][2] ? "" : W[w][9] ? " ✖ " + W[w][9] :
      W[w][1] === "sidecar_lost" ? " ✖ sidecar lost" : " ✖ killed";
    if (W[w][3]) tag += " ⚠ straggler";
    g.font = BOLD;
    const tw = tag ? g.measureText(tag).width : 0;
    g.font = "11px system-ui,sans-serif"; g.fillStyle = "#1d2330";
    const label = clip(W[w][0], LEFT - 10 - tw, g);
    g.fillText(label, 5, cy);
    if (tag) {
      const lx = 5 + g.measureText(label).width;
      g.font = BOLD; g.fillStyle = W[w][2] ? "#c00000" : "#b26b00"; g.fillText(tag, lx, cy);
    }
  }
  stats = { drawn: drawn, tiny: tiny, bins: bins, inView: inView };
  c.el.dataset.drawn = String(drawn + bins);
}

// ---- plots ----
const PH = 132, PT = 8, PB = 20;
const plots = D.plots.map(p => ({
  spec: p, c: null,
  series: p.series.map(s => {
    const t = new Float64Array(s.t.length);
    let acc = 0;
    for (let i = 0; i < t.length; i++) { acc += s.t[i]; t[i] = acc; }
    return { label: s.label, color: seriesColor(s.c), t: t, v: s.v };
  }),
}));
function lastLE(t, x) {
  let lo = 0, hi = t.length - 1, r = -1;
  while (lo <= hi) {
    const m = (lo + hi) >> 1;
    if (t[m] <= x) { r = m; lo = m + 1; } else hi = m - 1;
  }
  return r;
}

function drawPlot(p, counting) {
  const c = p.c, g = c.g, x0 = LEFT, x1 = c.w - RIGHT, y0 = PT, y1 = c.h - PB, unit = p.spec.unit;
  let ymax = 0, drawn = 0;
  // per series, the points in view plus one either side, so lines run to the edges
  const ranges = p.series.map(s => {
    const a = Math.max(lastLE(s.t, v0), 0), b = Math.min(lastLE(s.t, v1) + 1, s.t.length - 1);
    for (let i = a; i <= b; i++) if (s.v[i] > ymax) ymax = s.v[i];
    return [a, b];
  });
  const any = ranges.some(([a, b]) => b >= a), limits = p.spec.limits || [];
  if (any) for (const [v] of limits) ymax = Math.max(ymax, v * 1.1);  // room for its label
  if (!(ymax > 0)) ymax = 1;
  const ystep = (unit === "%" ? niceStep : niceBytes)(ymax / 3);
  ymax = Math.ceil(ymax / ystep) * ystep;
  const k = (x1 - x0) / (v1 - v0), ky = (y1 - y0) / ymax;
  g.clearRect(0, 0, c.w, c.h);
  g.save();
  g.beginPath(); g.rect(x0, y0 - 1, x1 - x0, y1 - y0 + 2); g.clip();
  if (!any) {
    g.fillStyle = "#8a94a6"; g.font = "13px system-ui,sans-serif";
    g.textAlign = "center"; g.textBaseline = "middle";
    const msg = p.series.length ? "no data in this time range" : p.spec.empty;
    g.fillText(msg, (x0 + x1) / 2, (y0 + y1) / 2);
    drawn = 1;
  }
  g.lineWidth = 1.4; g.lineJoin = "round";
  p.series.forEach((s, j) => {
    const [a, b] = ranges[j];
    g.strokeStyle = s.color; g.fillStyle = s.color;
    g.beginPath();
    for (let i = a; i <= b; i++) {
      const x = x0 + (s.t[i] - v0) * k, y = y1 - s.v[i] * ky;
      if (i > a) g.lineTo(x, y); else g.moveTo(x, y);
    }
    g.stroke();
    if (a === b) g.fillRect(x0 + (s.t[a] - v0) * k - 2, y1 - s.v[a] * ky - 2, 4, 4);
    drawn += b - a + 1;
  });
  if (any) deathsOnPlot(g, p, x0, x1, y0, y1, k, ky, limits);
  g.restore();
  if (counting) c.el.dataset.ink = String(ink(c, x0, y0, x1 - x0, y1 - y0));
  under(c, g => {
    timeGrid(c, g, y0, y1, null);
    g.fillStyle = "#e6e9ee";
    if (any) {
      for (let v = 0; v <= ymax + 1e-9; v += ystep) {
        g.fillRect(x0, Math.round(y1 - v * ky), x1 - x0, 1);
      }
    }
    g.fillStyle = "#fff"; g.fillRect(0, 0, c.w, c.h);
  });
  g.fillStyle = "#c9ced6"; g.fillRect(LEFT - 1, 0, 1, c.h);
  g.fillStyle = "#fff"; g.fillRect(0, y1 + 1, c.w, PB - 1);
  timeGrid(c, g, 0, 0, y1 + PB / 2 + 1);
  g.textBaseline = "middle"; g.textAlign = "right"; g.font = FONT; g.fillStyle = "#555";
  if (any) for (let v = 0; v <= ymax + 1e-9; v += ystep) {
    g.fillText(fmtVal(v, unit), LEFT - 6, Math.min(Math.max(y1 - v * ky, y0 + 5), y1 - 4));
  }
  g.textAlign = "left"; g.font = "bold 12px system-ui,sans-serif"; g.fillStyle = "#1d2330";
  g.fillText(clip(p.spec.title, LEFT - 12, g), 5, y0 + 6);
  g.font = FONT;
  const rows = Math.floor((y1 - y0 - 18) / 13);
  const shown = p.series.length > rows ? rows - 1 : p.series.length;
  for (let j = 0; j < shown; j++) {  // the legend, as far as it fits
    const y = y0 + 24 + j * 13, s = p.series[j];
    g.fillStyle = s.color; g.fillRect(6, y - 4, 9, 8);
    g.fillStyle = "#333"; g.fillText(clip(s.label, LEFT - 85, g), 19, y);  // clear of the axis labels
  }
  if (shown < p.series.length) {
    g.fillStyle = "#666";
    g.fillText("+" + (p.series.length - shown) + " more (hover)", 6, y0 + 24 + shown * 13);
  }
  if (p.spec.note) {
    g.fillStyle = "#8a5a00"; g.textAlign = "right"; g.fillText(p.spec.note, x1 - 2, y0 + 6);
  }
  c.el.dataset.drawn = String(drawn);
}

// A cgroup memory limit: a dashed red line, labelled. A worker's death: a dashed red line at
// the moment, and on the memory plot a ✖ at the tree's last RSS before it, and its cause.
function deathsOnPlot(g, p, x0, x1, y0, y1, k, ky, limits) {
  const mem = p.spec.id === "plot-mem";
  g.strokeStyle = RED; g.fillStyle = RED; g.lineWidth = 1; g.font = FONT;
  g.setLineDash([5, 3]);
  for (const [v, label] of limits) {
    const y = Math.round(y1 - v * ky) + 0.5;
    g.beginPath(); g.moveTo(x0, y); g.lineTo(x1, y); g.stroke();
    g.textAlign = "right"; g.textBaseline = "bottom"; g.fillText(label, x1 - 4, y - 2);
  }
  D.deaths.forEach(([t, w, label, rss], j) => {
    if (t < v0 || t > v1) return;
    const x = Math.round(x0 + (t - v0) * k) + 0.5;
    g.setLineDash([3, 3]);
    g.beginPath(); g.moveTo(x, y0); g.lineTo(x, y1); g.stroke();
    if (!mem) return;
    g.setLineDash([]);
    // three rows, so neighbours do not collide; left of the line near the right edge
    const text = clip("✖ " + label + " " + W[w][0], 220, g);
    const left = x + 3 + g.measureText(text).width > x1;
    g.textAlign = left ? "right" : "left"; g.textBaseline = "top";
    g.fillText(text, left ? x - 3 : x + 3, y0 + 2 + (j % 3) * 12);
    if (rss !== null) {
      g.font = "bold 12px system-ui,sans-serif"; g.textAlign = "center"; g.textBaseline = "middle";
      g.fillText("✖", x, y1 - rss * ky);
      g.font = FONT;
    }
  });
  g.setLineDash([]);
}

// ---- drawing everything ----
const note = document.getElementById("gantt-note");
const num = n => n.toLocaleString("en-US");
// counting: also count each canvas's inked pixels (data-ink), which costs as much as drawing;
// while zooming and panning that waits until the view has been still for a moment.
function drawAll(counting) {
  const t0 = performance.now();
  const jobs = [["gantt", drawGantt], ...plots.map(p => [p.spec.id, c => drawPlot(p, c)])];
  for (const [name, fn] of jobs) {
    try { fn(counting); } catch (e) { report(name + ": " + (e && e.stack || e)); }
  }
  const step = niceStep(Math.max(v1 - v0, 1) / 10);
  let s = "Showing " + tickLabel(Math.max(v0, 0), step) + " – " +
    tickLabel(Math.min(v1, D.end_us), step) + " of " + fmtDur(D.end_us) + ". " +
    num(stats.inView) + " of " + num(N) + " spans in view: " + num(stats.drawn) + " drawn";
  if (stats.tiny) {
    s += "; " + num(stats.tiny) + " narrower than ½ px drawn as " + num(stats.bins) +
      " 1-px bins (zoom in to separate them)";
  }
  if (D.binned) s += "; " + num(D.binned) + " more spans summarised as " + num(NB) + " grey bins";
  if (!N && !NB) s = "No spans in this timeline";
  note.textContent = s + ". (" + Math.round(performance.now() - t0) + " ms)";
}
let pending = false, settle = 0;
function redraw() {
  if (!pending) {
    pending = true;
    requestAnimationFrame(() => { pending = false; drawAll(false); });
  }
  clearTimeout(settle);
  settle = setTimeout(() => drawAll(true), 400);
}
let sized = false;  // laid out at the page's own width (not in a frame of no width yet)
function layout() {
  // One width for every canvas, or the time axes would not line up. Sizing the canvases can
  // make the page tall enough to grow a scrollbar, which narrows it: then size them again.
  sized = stack.clientWidth > 0;
  for (let pass = 0; pass < 2; pass++) {
    const w = Math.max(stack.clientWidth, 640);
    gantt = setup(document.getElementById("gantt"), ganttH, w);
    for (const p of plots) p.c = setup(document.getElementById(p.spec.id), PH, w);
    if (Math.max(stack.clientWidth, 640) === w) break;
  }
}

// ---- hover: text only, through textContent ----
function line(parent, text, cls) {
  const d = document.createElement("div");
  d.textContent = text;
  if (cls) d.className = cls;
  parent.appendChild(d);
}
function showTip(ev, fill) {
  tip.replaceChildren();
  fill(tip);
  tip.style.display = "block";
  const r = tip.getBoundingClientRect();
  let x = ev.clientX + 14, y = ev.clientY + 14;
  if (x + r.width > window.innerWidth - 4) x = ev.clientX - r.width - 14;
  if (y + r.height > window.innerHeight - 4) y = Math.max(4, ev.clientY - r.height - 14);
  tip.style.left = x + "px";
  tip.style.top = y + "px";
}
function hideTip() { tip.style.display = "none"; cursorLine.style.display = "none"; }
// The shortest span of lane l within tol of time t, and how many are there.
function spanAt(l, t, tol) {
  let lo = laneStart[l], hi = laneStart[l + 1] - 1, r = lo - 1;
  while (lo <= hi) {
    const m = (lo + hi) >> 1;
    if (ss[laneIdx[m]] <= t + tol) { r = m; lo = m + 1; } else hi = m - 1;
  }
  let best = -1, bestLen = Infinity, near = 0;
  for (let m = r, n = 0; m >= laneStart[l] && n < 20000; m--, n++) {
    const i = laneIdx[m];
    if (ss[i] < t - tol - laneMax[l]) break;
    const e = endOf(i);
    if (e >= t - tol) { near++; if (e - ss[i] < bestLen) { best = i; bestLen = e - ss[i]; } }
  }
  return [best, near];
}
function workerTip(el, wk) {
  line(el, wk[0], "h");
  line(el, "host " + wk[5] + " · pid " + wk[6] + " · status " + wk[1]);
  if (wk[2]) line(el, (wk[9] ? wk[9] + " inside a job" : "killed or lost") +
    ": its timeline ends early", "e");
  for (const text of wk[10] || []) line(el, "  " + text, "e");
  if (wk[3]) line(el, "straggler: job time well above its peers'", "e");
  if (wk[8]) line(el, wk[8] + " note(s): see the top of the page", "k");
}
function spanTip(el, i, wk, near) {
  const f = sf[i], th = D.threads[sh[i]];
  line(el, D.names[sn[i]], "h");
  line(el, ((f & 2) ? "job" : "span") + " · " + fmtDur(endOf(i) - ss[i]) +
    ((f & 8) ? " (still running)" : "") + " · starts +" + fmtDur(Math.max(ss[i], 0)) +
    " · depth " + (S.e ? S.e[i] : sd[i]));
  line(el, "worker " + wk[0] + " · pid " + th[0] + " · tid " + th[1]);
  if (errOf.has(i)) line(el, "error: " + errOf.get(i), "e");
  if (f & 16) line(el, "cut short: still open when its process died; it ends at the death", "e");
  if (f & 4) {
    line(el, "the worker died during this job:", "e");
    for (const text of jobDeath.get(i) || []) line(el, "  " + text, "e");
  }
  if (attrOf.has(i)) line(el, "attrs: " + attrOf.get(i), "k");
  const parts = [];
  D.akeys.forEach((key, j) => {
    const code = attrCode(j, i), scale = D.ascale[j];
    if (code === null) return;
    if (scale === "wall") {
      const cpu = fmtDur(code / 100 * (se[i] - ss[i]));
      const of = /cpu/.test(key) ? " % of one core)" : " % of its wall time)";
      parts.push(key + " ≈ " + cpu + " (" + code + of);
    } else parts.push(key + " ≈ " + fmtAttr(key, scale === null ? code : code * scale));
  });
  if (parts.length) line(el, "estimated from the samples around it:", "k");
  for (const p of parts) line(el, "  " + p);
  if (near > 1) line(el, (near - 1) + " more span(s) under the cursor in this lane; zoom in", "k");
}
// The mark drawn under (x, y) on the Gantt (its triangle at the top of its worker's band,
// give or take 4 px), or null.
function markAt(x, y) {
  let best = null, bestD = 5;
  for (const m of D.marks) {
    if (y < bandY[m[0]] - 2 || y > bandY[m[0]] + 8) continue;
    const d = Math.abs(X(gantt, m[1]) - x);
    if (d < bestD) { best = m; bestD = d; }
  }
  return best;
}
function markTip(el, m) {
  line(el, D.names[m[2]], "h");
  line(el, "mark · at +" + fmtDur(Math.max(m[1], 0)) + " · worker " + W[m[0]][0]);
  if (m[3] >= 0) {
    line(el, "every thread's Python stack: " + D.dumps[m[3]]);
    line(el, "click to read them", "k");
  }
}
function ganttClick(x, y) {
  const m = markAt(x, y);
  if (!m || m[3] < 0) return;
  const d = document.getElementById("stacks-" + m[3]);
  if (!d) return;
  d.open = true;
  d.scrollIntoView();
}
function ganttHover(ev, c, x, y) {
  let w = -1;
  for (let j = 0; j < NW && w < 0; j++) if (y >= bandY[j] - 1 && y < bandY[j] + bandH[j] + 1) w = j;
  if (w < 0) return hideTip();
  const wk = W[w];
  if (x < LEFT) return showTip(ev, el => workerTip(el, wk));
  const mk = markAt(x, y);
  if (mk) return showTip(ev, el => markTip(el, mk));
  const d = Math.floor((y - bandY[w] - (bandH[w] - wk[4] * laneH) / 2) / laneH);
  if (d < 0 || d >= wk[4]) return hideTip();
  const l = laneOff[w] + d, t = T(c, x), tol = 3 * (v1 - v0) / (c.w - LEFT - RIGHT);
  const [i, near] = spanAt(l, t, tol);
  if (i >= 0) return showTip(ev, el => spanTip(el, i, wk, near));
  for (let j = 0; j < NB; j++) {
    if (laneOff[B.w[j]] + B.d[j] !== l || t < B.t[j] || t > B.t[j] + B.l[j]) continue;
    return showTip(ev, el => {
      line(el, num(B.c[j][0]) + " short spans summarised here", "h");
      line(el, "total " + fmtDur(B.c[j][1]) + " · " + wk[0]);
    });
  }
  hideTip();
}
function plotHover(ev, p, x) {
  const t = T(p.c, x), vals = [];
  for (const s of p.series) {
    const i = lastLE(s.t, t), n = s.t.length;
    // past a series' last point only as far as its last step: a worker that ended says nothing
    const gap = n > 1 ? s.t[n - 1] - s.t[n - 2] : 0;
    if (i >= 0 && (i < n - 1 || t - s.t[i] <= gap)) vals.push([s.v[i], s.label]);
  }
  vals.sort((a, b) => b[0] - a[0]);
  showTip(ev, el => {
    line(el, p.spec.title + " at +" + fmtDur(Math.max(t, 0)), "h");
    if (!vals.length) line(el, p.series.length ? "no sample here" : p.spec.empty, "k");
    for (const [v, label] of vals.slice(0, 12)) line(el, label + ": " + fmtVal(v, p.spec.unit));
    if (vals.length > 12) line(el, "… " + (vals.length - 12) + " more", "k");
  });
}

// ---- zoom and pan: one view for all canvases ----
let drag = null;
function attach(el, plot) {
  const c = () => (plot ? plot.c : gantt);
  const pos = ev => {
    const r = el.getBoundingClientRect();
    return [ev.clientX - r.left, ev.clientY - r.top];
  };
  el.addEventListener("wheel", ev => {
    const [x] = pos(ev);
    if (x < LEFT) return;
    ev.preventDefault();
    const t = T(c(), x), f = Math.exp(Math.max(-1, Math.min(1, ev.deltaY * 0.0015)));
    let a = t - (t - v0) * f, b = t + (v1 - t) * f;
    if (b - a < 1) { a = t - 0.5; b = t + 0.5; }  // 1 us across at most
    v0 = a; v1 = b;
    redraw();
  }, { passive: false });
  el.addEventListener("mousedown", ev => {
    if (pos(ev)[0] < LEFT) return;
    drag = { x: ev.clientX, v0: v0, v1: v1, c: c() };
    ev.preventDefault();
  });
  el.addEventListener("dblclick", () => { v0 = D.t0; v1 = D.t1; redraw(); });
  if (!plot) el.addEventListener("click", ev => { const [x, y] = pos(ev); ganttClick(x, y); });
  el.addEventListener("mousemove", ev => {
    if (drag) return;
    const [x, y] = pos(ev), inside = x >= LEFT && x <= c().w - RIGHT;
    cursorLine.style.display = inside ? "block" : "none";
    cursorLine.style.left = x + "px";
    if (!plot) ganttHover(ev, gantt, x, y); else if (inside) plotHover(ev, plot, x); else hideTip();
  });
  el.addEventListener("mouseleave", hideTip);
}
window.addEventListener("mousemove", ev => {
  if (!drag) return;
  const dt = (ev.clientX - drag.x) * (drag.v1 - drag.v0) / (drag.c.w - LEFT - RIGHT);
  v0 = drag.v0 - dt; v1 = drag.v1 - dt;
  hideTip();
  redraw();
});
window.addEventListener("mouseup", () => { drag = null; });
// Redrawn when the page's width changes: a window resized (once it settles), or a frame (a
// notebook's iframe) that got its width only after the report first drew: a notebook runs an
// output's document before it lays the output out, so the first layout saw no width and drew
// at the 640 px minimum. That one is fitted at once, not after a timer (a frame's timers may
// be held back while it is off screen).
let resizing = 0;
function fit() {
  if (Math.max(stack.clientWidth, 640) !== gantt.w) { layout(); drawAll(true); }
}
function relayout() {
  if (!sized && stack.clientWidth > 0) { fit(); return; }
  clearTimeout(resizing);
  resizing = setTimeout(fit, 100);
}
window.addEventListener("resize", relayout);
window.addEventListener("load", relayout);
if (window.ResizeObserver) new ResizeObserver(relayout).observe(stack);

// For tests and scripts: where the k-th span named `name` (of a worker whose id starts with
// `worker`, if given) is drawn on the Gantt now, in the canvas's CSS pixels; null if nowhere.
// Where the k-th mark is drawn on the Gantt now (CSS pixels), or null if out of view.
window.__wsMarkSpot = function (k) {
  const m = D.marks[k];
  if (!m || m[1] < v0 || m[1] > v1) return null;
  return { x: X(gantt, m[1]), y: bandY[m[0]] + 2 };
};
window.__wsSpot = function (name, k, worker) {
  let seen = 0;
  for (let i = 0; i < N; i++) {
    if (D.names[sn[i]] !== name || (worker && !W[sw[i]][0].startsWith(worker))) continue;
    if (seen++ < (k || 0)) continue;
    const a = Math.max(ss[i], v0), b = Math.min(endOf(i), v1);
    return { x: X(gantt, (a + b) / 2), y: laneY[laneOff[sw[i]] + sd[i]] + laneH / 2 };
  }
  return null;
};

layout();
attach(gantt.el, null);
for (const p of plots) attach(p.c.el, p);
drawAll(true);  // synchronously: the page is complete when this script ends
body.dataset.ready = "1";
})();
