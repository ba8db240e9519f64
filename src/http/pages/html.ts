import { createHash } from 'node:crypto';

/** Helpers for the server-rendered pages: no external resources; inline style and script allowed by hash in a strict CSP. */

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

export function esc(value: string | number): string {
  return String(value).replace(/[&<>"']/g, (c) => ESCAPES[c]!);
}

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

/** 1536 → "1.5 KiB"; binary units, like the SVC_ size settings. */
export function formatBytes(n: number): string {
  let v = n;
  let u = 0;
  while (Math.abs(v) >= 1024 && u < UNITS.length - 1) {
    v /= 1024;
    u++;
  }
  return u === 0 ? `${v} B` : `${v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2)} ${UNITS[u]}`;
}

/** Short power-of-two label for axis ticks: 1024 → "1K", 4 GiB → "4G". */
export function shortBytes(n: number): string {
  const labels = ['', 'K', 'M', 'G', 'T', 'P'];
  let v = n;
  let u = 0;
  while (v >= 1024 && u < labels.length - 1) {
    v /= 1024;
    u++;
  }
  return `${Number.isInteger(v) ? v : v.toFixed(1)}${labels[u]}`;
}

/** 0.3712 → "37.1 %". */
export function formatRatio(r: number): string {
  return `${(r * 100).toFixed(1)} %`;
}

/** Seconds → "3 d 4 h", "12 min", "40 s". */
export function formatAge(seconds: number): string {
  if (seconds < 60) return `${seconds} s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ${Math.floor((seconds % 3600) / 60)} min`;
  return `${Math.floor(seconds / 86400)} d ${Math.floor((seconds % 86400) / 3600)} h`;
}

/** A figure with its exact value machine-readable (`data-field`), so tests and scripts need not parse the human text. */
export function figure(field: string, value: number, text: string): string {
  return `<data data-field="${esc(field)}" value="${esc(value)}">${esc(text)}</data>`;
}

/** A table cell carrying its column name, shown beside the value when a `stack` table is stacked on a narrow screen. */
export function cell(label: string, html: string, cls = ''): string {
  return `<td data-label="${esc(label)}"${cls === '' ? '' : ` class="${cls}"`}>${html}</td>`;
}

/** The verdict of a repository's last audit, the same words on the dashboard and the repository page. */
export function auditBadge(ok: boolean): string {
  return ok ? '<span class="badge good">clean</span>' : '<span class="badge bad">problems found</span>';
}

export function card(label: string, field: string, value: number, text: string, note = ''): string {
  return `<div class="card"><div class="label">${esc(label)}</div><div class="value">${figure(field, value, text)}</div>${note === '' ? '' : `<div class="note">${note}</div>`}</div>`;
}

/*
 * Light and dark themes through prefers-color-scheme; under 640 px, tables stack rows as cards and
 * plots take the full width. Header text is at least 4.5:1 on its background (WCAG AA).
 */
const STYLE = `
:root{color-scheme:light dark;--fg:#1d2330;--muted:#566070;--line:#dfe3ea;--bg:#f6f7f9;--card:#fff;--th:#eef1f5;--grid:#e3e7ee;--input:#c3c9d4;
--accent:#2f6fde;--warn:#b4261a;--ok:#1f7a3d;--caution:#8a5a00;--head-bg:#1d2330;--head-fg:#fff;--head-muted:#c5ccd8;
--s0:#2f6fde;--s1:#d2601a;--s2:#1f9d6a;--s3:#7b4fc9;--bad-bg:#fde7e5;--good-bg:#e3f4e8;--warn-bg:#fdf0d5}
@media (prefers-color-scheme:dark){.s0{stroke-opacity:.75}:root{--fg:#e3e7ee;--muted:#a4adbb;--line:#343b48;--bg:#121419;--card:#1b1f27;--th:#242a35;--grid:#2e3440;--input:#4a5260;
--accent:#5b93f5;--warn:#ff8f85;--ok:#6fd08c;--caution:#f2c46b;--head-bg:#0a0c10;--head-fg:#f3f5f8;--head-muted:#b5bdca;
--s0:#6ea8ff;--s1:#ffa45c;--s2:#4fd19a;--s3:#c2a3ff;--bad-bg:#4a1f1c;--good-bg:#17372a;--warn-bg:#3d300f}}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg)}
a{color:var(--accent)}
header{background:var(--head-bg);color:var(--head-fg);border-bottom:1px solid var(--line);padding:12px 24px;display:flex;flex-wrap:wrap;align-items:center;gap:8px 16px}
header h1{font-size:18px;margin:0;font-weight:600;overflow-wrap:anywhere}
header .muted,header .who{color:var(--head-muted)}
header .who strong{color:var(--head-fg)}
header .who{margin-left:auto;font-size:13px}
header button{margin-left:8px}
main{max-width:1100px;margin:0 auto;padding:20px 24px 40px}
h2{font-size:15px;margin:28px 0 10px;font-weight:600}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,170px),1fr));gap:12px}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:12px 14px}
.card .label{color:var(--muted);font-size:12px;text-transform:uppercase;letter-spacing:.03em}
.card .value{font-size:22px;font-weight:600;margin-top:2px}
.card .note{color:var(--muted);font-size:12px}
.plots{margin-top:12px;display:grid;align-items:start;grid-template-columns:repeat(auto-fill,minmax(min(100%,460px),1fr));gap:12px}
.plot{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px 12px;min-width:0}
.plot.narrow{max-width:760px}
.plot h3{font-size:13px;margin:0 0 6px;font-weight:600}
svg{display:block}
svg.chart{width:100%;overflow:visible;font-size:12px}
svg.chart.axis{width:calc(100% - 74px);margin-left:70px}
svg.chart svg{overflow:visible}
.chart text{fill:var(--muted)}
.chart text.value,.chart text.label{fill:var(--fg)}
.chart .axis-title{font-weight:600}
.chart .grid{stroke:var(--grid)}
.chart .tick{stroke:var(--muted)}
.c0{fill:var(--s0)}.c1{fill:var(--s1)}.c2{fill:var(--s2)}.c3{fill:var(--s3)}
.s0{stroke:var(--s0);stroke-width:5;stroke-opacity:.45;stroke-linecap:round;stroke-linejoin:round}
.s1{stroke:var(--s1);stroke-width:2;stroke-dasharray:7 4}
.s2{stroke:var(--s2);stroke-width:2;stroke-dasharray:2 3}
.s3{stroke:var(--s3);stroke-width:2;stroke-dasharray:10 3 2 3}
circle.dot{stroke:none}
circle.s0{fill:var(--s0);fill-opacity:.6}circle.s1{fill:var(--s1)}circle.s2{fill:var(--s2)}circle.s3{fill:var(--s3)}
.legend{list-style:none;margin:0 0 4px;padding:0;display:flex;flex-wrap:wrap;gap:4px 16px;font-size:12px;color:var(--fg)}
.legend li{display:flex;align-items:center;gap:6px}
table{border-collapse:collapse;width:100%;background:var(--card);border:1px solid var(--line);border-radius:8px;overflow:hidden}
th,td{text-align:left;padding:6px 10px;border-bottom:1px solid var(--line);font-size:13px;overflow-wrap:anywhere}
th{background:var(--th);font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace}
.badge{display:inline-block;padding:0 6px;border-radius:10px;font-size:12px;font-weight:600;background:var(--th);color:var(--fg)}
.badge.stale,.badge.bad{background:var(--bad-bg);color:var(--warn)}
.badge.good{background:var(--good-bg);color:var(--ok)}
.badge.warn{background:var(--warn-bg);color:var(--caution)}
.detail{font-size:12px;color:var(--muted)}
.muted{color:var(--muted)}
form.panel{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:14px;display:grid;gap:10px;max-width:640px}
form.panel label{display:grid;gap:4px;font-weight:600;font-size:13px}
form.panel label.inline{display:flex;gap:8px;align-items:center}
form.panel .hint{font-weight:400;color:var(--muted);font-size:12px}
input[type=text],input[type=password],textarea{font:inherit;padding:6px 8px;border:1px solid var(--input);border-radius:6px;width:100%;background:var(--card);color:var(--fg)}
textarea{min-height:60px}
button{font:inherit;padding:6px 14px;border-radius:6px;border:1px solid #2a5fc0;background:#2f6fde;color:#fff;cursor:pointer}
button.secondary{background:var(--card);color:var(--fg);border-color:var(--input)}
.actions{display:flex;gap:8px;flex-wrap:wrap}
#msg{min-height:1.4em;font-weight:600}
#msg.error{color:var(--warn)}
#msg.ok{color:var(--ok)}
progress{width:140px;accent-color:var(--accent);vertical-align:middle}
.pct{font-variant-numeric:tabular-nums}
@media (max-width:640px){
header{padding:10px 12px}
header .who{margin-left:0}
main{padding:16px 12px 32px}
.chart text.alt{display:none}
table.stack,table.stack tbody,table.stack tr,table.stack td{display:block;width:100%}
table.stack thead{display:none}
table.stack tr{border-bottom:1px solid var(--line);padding:4px 0}
table.stack tr:last-child{border-bottom:0}
table.stack td{border:0;padding:3px 12px;display:flex;justify-content:space-between;align-items:center;gap:12px;text-align:right}
table.stack td::before{content:attr(data-label);color:var(--muted);font-weight:600;text-align:left;flex:none}
table.stack td.progress progress{flex:1;min-width:0}
}
`;

/** sha256 CSP source for an inline element's exact text. */
export function cspHash(text: string): string {
  return `'sha256-${createHash('sha256').update(text, 'utf8').digest('base64')}'`;
}

const STYLE_HASH = cspHash(STYLE);

/** A complete HTML document and the headers it must be served with (strict CSP, no framing, no caching). */
export function htmlPage(title: string, header: string, body: string, script = ''): { html: string; headers: Record<string, string> } {
  const scriptSrc = script === '' ? "'none'" : cspHash(script);
  const html =
    `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">` +
    `<title>${esc(title)}</title><style>${STYLE}</style></head><body><header>${header}</header><main>${body}</main>` +
    (script === '' ? '' : `<script>${script}</script>`) +
    `</body></html>`;
  return {
    html,
    headers: {
      'Content-Security-Policy': `default-src 'none'; style-src ${STYLE_HASH}; script-src ${scriptSrc}; img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'`,
      'X-Content-Type-Options': 'nosniff',
      'X-Frame-Options': 'DENY',
      'Referrer-Policy': 'no-referrer',
      'Cache-Control': 'no-store',
    },
  };
}
