// about.js - version, store, broker (no password), the settings that
// matter and the dashboard's mode, from /ui/config.json.
import { config } from './api.js';
import { h, replace, table, dd } from './dom.js';

export function render(main) {
  const c = config;
  const s = c.settings || {};
  replace(
    main,
    h('h1', {}, 'About'),
    h(
      'dl',
      { class: 'fields' },
      dd('version', c.version),
      dd(
        'dashboard',
        c.mode +
          (c.mode_chosen_by === 'auto'
            ? ' (auto: ' + (c.token_required ? 'a token is set' : 'no token is set') + ')'
            : ''),
      ),
      dd('API token', c.token_required ? 'required' : 'not set'),
      dd('store', c.store ? c.store.kind + ': ' + c.store.target : '—'),
      dd('broker', c.broker ? c.broker.urls.join(', ') : '—'),
    ),
    h('h2', {}, 'Settings'),
    Object.keys(s).length
      ? table(
          'Settings',
          ['Setting', 'Value'],
          Object.entries(s).map(([k, v]) =>
            h(
              'tr',
              {},
              h('td', { class: 'mono' }, k),
              h('td', { class: 'mono' }, typeof v === 'string' ? v : JSON.stringify(v)),
            ),
          ),
        )
      : h('p', {}, 'Not shown without the token.'),
  );
}
