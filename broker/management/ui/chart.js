/* OtterMQ web UI: a small line chart on a canvas (no library). */
"use strict";

const CHART_COLORS = ["#2a6f97", "#e07a1f", "#2e7d32", "#b3261e", "#7b4fa0", "#8c6d1f", "#00838f", "#5d6d7e"];

// series: [{label, points: [[timeMs, value], ...]}]; draws the last `windowMs` of data
function drawChart(canvas, series, windowMs = 5 * 60 * 1000, unit = "") {
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth || 400;
  const height = canvas.clientHeight || 200;
  canvas.width = width * ratio;
  canvas.height = height * ratio;
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, width, height);
  const left = 56, right = 8, top = 8, bottom = 20;
  const now = Date.now(), start = now - windowMs;
  let max = 0;
  for (const s of series) for (const [t, v] of s.points) if (t >= start && v > max) max = v;
  max = niceMax(max);
  ctx.strokeStyle = "#d9dee4";
  ctx.fillStyle = "#66717e";
  ctx.font = "11px system-ui, sans-serif";
  ctx.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const y = top + (height - top - bottom) * (1 - i / 4);
    ctx.beginPath(); ctx.moveTo(left, y); ctx.lineTo(width - right, y); ctx.stroke();
    const label = (max * i / 4).toLocaleString("en-US", {maximumFractionDigits: 1}) + unit;
    ctx.fillText(label, 4, y + 4);
  }
  for (let m = 0; m <= windowMs / 60000; m++) {
    const x = left + (width - left - right) * (1 - (m * 60000) / windowMs);
    ctx.fillText(m ? `-${m}m` : "now", Math.min(x - 8, width - 28), height - 5);
  }
  series.forEach((s, i) => {
    ctx.strokeStyle = CHART_COLORS[i % CHART_COLORS.length];
    ctx.lineWidth = 2;
    ctx.beginPath();
    let first = true;
    for (const [t, v] of s.points) {
      if (t < start) continue;
      const x = left + (width - left - right) * ((t - start) / windowMs);
      const y = top + (height - top - bottom) * (1 - (max ? v / max : 0));
      if (first) { ctx.moveTo(x, y); first = false; } else ctx.lineTo(x, y);
    }
    ctx.stroke();
  });
}

function niceMax(v) {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

// A chart block: title, canvas, legend; returns {el, update(seriesList)}
function chartBlock(title, labels, unit = "") {
  const canvas = h("canvas", {"aria-label": title});
  const legend = h("div", {class: "legend"}, labels.map((label, i) => {
    const span = h("span", {}, label);
    span.style.setProperty("--c", CHART_COLORS[i % CHART_COLORS.length]);
    return span;
  }));
  const el = h("div", {class: "chart"}, h("h3", {}, title), canvas, legend);
  return {el, update: (series) => drawChart(canvas, series, undefined, unit)};
}
