/**
 * The proxy the host-config specs set, and what the API reads back for it: the port as a
 * string and no password (docs/device-api.md "Host config").
 */
import type { ProxyConfig } from './device-api.js';

export const PROXY: ProxyConfig = { type: 'socks5', ip: 'proxy.example', port: 1080, login: 'user', password: 'hunter2', noProxy: ['10.0.0.0/8', '192.168.7.7'] };

export const PROXY_READ_BACK = { type: 'socks5', ip: 'proxy.example', port: '1080', login: 'user', noProxy: ['10.0.0.0/8', '192.168.7.7'] };
