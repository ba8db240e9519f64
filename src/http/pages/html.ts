import { createHash } from 'node:crypto';

/**
 * Small helpers for the server-rendered pages: escaping, human figures and the page shell. The pages
 * carry no external resources; inline style and script are allowed by hash in a strict CSP.
 */

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

/** Escapes text for HTML element content and double- or single-quoted attributes. */
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

/** A labelled figure card. */
export function card(label: string, field: string, value: number, text: string, note = ''): string {
  return `<div class="card"><div class="label">${esc(label)}</div><div class="value">${figure(field, value, text)}</div>${note === '' ? '' : `<div class="note">${note}</div>`}</div>`;
}

const STYLE = `
:root{color-scheme:light;--fg:#1d2330;--muted:#5d6677;--line:#dfe3ea;--bg:#f6f7f9;--accent:#2f6fde;--warn:#b4261a;--ok:#1f7a3d}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg)}
header{background:#1d2330;color:#fff;padding:12px 24px;display:flex;align-items:center;gap:16px}
header h1{font-size:18px;margin:0;font-weight:600}
header .who{margin-left:auto;font-size:13px;opacity:.9}
header button{margin-left:8px}
main{max-width:1100px;margin:0 auto;padding:20px 24px 40px}
h2{font-size:15px;margin:28px 0 10px;font-weight:600}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(170px,1fr));gap:12px}
.card{background:#fff;border:1px solid var(--line);border-radius:8px;padding:12px 14px}
.card .label{color:var(--muted);font-size:12px;text-transform:uppercase;letter-spacing:.03em}
.card .value{font-size:22px;font-weight:600;margin-top:2px}
.card .note{color:var(--muted);font-size:12px}
.plots{margin-top:12px;display:grid;grid-template-columns:repeat(auto-fill,minmax(480px,1fr));gap:12px}
.plot{background:#fff;border:1px solid var(--line);border-radius:8px;padding:10px 12px}
.plot.narrow{max-width:760px}
.plot h3{font-size:13px;margin:0 0 6px;font-weight:600}
svg{display:block;width:100%;height:auto}
table{border-collapse:collapse;width:100%;background:#fff;border:1px solid var(--line);border-radius:8px;overflow:hidden}
th,td{text-align:left;padding:6px 10px;border-bottom:1px solid var(--line);font-size:13px}
th{background:#eef1f5;font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace}
.badge{display:inline-block;padding:0 6px;border-radius:10px;font-size:11px;font-weight:600;background:#eef1f5}
.badge.stale,.badge.bad{background:#fde7e5;color:var(--warn)}
.badge.good{background:#e3f4e8;color:var(--ok)}
.muted{color:var(--muted)}
form.panel{background:#fff;border:1px solid var(--line);border-radius:8px;padding:14px;display:grid;gap:10px;max-width:640px}
form.panel label{display:grid;gap:4px;font-weight:600;font-size:13px}
form.panel label.inline{display:flex;gap:8px;align-items:center}
form.panel .hint{font-weight:400;color:var(--muted);font-size:12px}
input[type=text],input[type=password],textarea{font:inherit;padding:6px 8px;border:1px solid #c3c9d4;border-radius:6px;width:100%}
textarea{min-height:60px}
button{font:inherit;padding:6px 14px;border-radius:6px;border:1px solid #2a5fc0;background:var(--accent);color:#fff;cursor:pointer}
button.secondary{background:#fff;color:var(--fg);border-color:#c3c9d4}
.actions{display:flex;gap:8px}
#msg{min-height:1.4em;font-weight:600}
#msg.error{color:var(--warn)}
#msg.ok{color:var(--ok)}
progress{width:160px}
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
