// chart.js - small hand-written SVG line charts (no library).
const NS = 'http://www.w3.org/2000/svg';

function s(tag, attrs) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

// series: [{name, values: [number|null]}], xs: [ms]; returns a <figure>
// with the chart (an image with a text alternative) and its legend.
export function lineChart(title, xs, series, unit) {
  let max = 0;
  for (const se of series) for (const v of se.values) if (v != null && v > max) max = v;
  if (max === 0) max = 1;
  // The left margin fits the longest value label (about 6 units a
  // character at the 10px font), drawn right-aligned against the axis; the
  // time labels are anchored inside the box at each end: nothing is cut.
  const topLabel = fmt(max) + (unit || '');
  const W = 400,
    H = 140,
    L = Math.max(24, Math.ceil(topLabel.length * 6.2) + 8),
    R = 6,
    T = 8,
    B = 18;
  const x0 = xs.length ? xs[0] : 0,
    x1 = xs.length ? xs[xs.length - 1] : 1;
  const px = (x) => L + (x1 === x0 ? 0 : ((x - x0) / (x1 - x0)) * (W - L - R));
  const py = (v) => T + (1 - v / max) * (H - T - B);
  const svg = s('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, role: 'img', preserveAspectRatio: 'none' });
  const last = series
    .map((se) => {
      const v = se.values.length ? se.values[se.values.length - 1] : null;
      return `${se.name} ${v == null ? 'no data' : fmt(v) + (unit || '')}`;
    })
    .join(', ');
  const label = s('title', {});
  label.textContent = `${title}: last interval ${last}; peak ${topLabel}`;
  svg.appendChild(label);
  svg.appendChild(s('line', { class: 'axis', x1: L, y1: H - B, x2: W - R, y2: H - B }));
  svg.appendChild(s('line', { class: 'axis', x1: L, y1: T, x2: L, y2: H - B }));
  const top = s('text', { x: L - 4, y: T + 8, 'text-anchor': 'end', class: 'y-label' });
  top.textContent = topLabel;
  svg.appendChild(top);
  const zero = s('text', { x: L - 4, y: H - B, 'text-anchor': 'end', class: 'y-label' });
  zero.textContent = '0';
  svg.appendChild(zero);
  if (xs.length) {
    const a = s('text', { x: L, y: H - 4, class: 'x-label' });
    a.textContent = new Date(x0).toLocaleTimeString();
    const b = s('text', { x: W - R, y: H - 4, 'text-anchor': 'end', class: 'x-label' });
    b.textContent = new Date(x1).toLocaleTimeString();
    svg.appendChild(a);
    svg.appendChild(b);
  }
  series.forEach((se, i) => {
    const pts = [];
    se.values.forEach((v, k) => {
      if (v != null) pts.push(`${px(xs[k]).toFixed(1)},${py(v).toFixed(1)}`);
    });
    if (pts.length) svg.appendChild(s('polyline', { class: 's' + i, points: pts.join(' ') }));
  });
  const fig = document.createElement('figure');
  const cap = document.createElement('figcaption');
  cap.textContent = title;
  fig.appendChild(cap);
  fig.appendChild(svg);
  const legend = document.createElement('ul');
  legend.className = 'legend';
  series.forEach((se, i) => {
    const li = document.createElement('li');
    const sw = document.createElement('span');
    sw.className = 'swatch s' + i;
    li.appendChild(sw);
    li.appendChild(document.createTextNode(se.name));
    legend.appendChild(li);
  });
  fig.appendChild(legend);
  return fig;
}

function fmt(v) {
  return (v >= 100 ? Math.round(v) : Math.round(v * 10) / 10).toLocaleString('en');
}
