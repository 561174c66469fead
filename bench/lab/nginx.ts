import { spawn, spawnSync } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import { existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { freePort } from '../proc.ts'

/**
 * nginx as the reference pass-through proxy: one worker (Node is one thread too), no buffering,
 * HTTP/1.1 keep-alive to the upstream, no access log. Config written to a temp dir.
 */

export const NGINX_HINT = 'nginx not found: install it for the reference columns (Debian/Ubuntu: apt-get install -y nginx-light)'

export function findNginx(): string | undefined {
  for (const p of ['/usr/sbin/nginx', '/usr/local/sbin/nginx', '/usr/local/nginx/sbin/nginx']) if (existsSync(p)) return p
  const which = spawnSync('sh', ['-c', 'command -v nginx'], { encoding: 'utf8' })
  const found = which.stdout.trim()
  return found === '' ? undefined : found
}

function nginxConf(dir: string, listen: number, upstreamPort: number, altPort?: number): string {
  return `daemon off;
master_process on;
worker_processes 1;
worker_rlimit_nofile 16384;
pid ${join(dir, 'nginx.pid')};
error_log ${join(dir, 'error.log')} warn;
events { worker_connections 8192; multi_accept on; }
http {
  access_log off;
  client_body_temp_path ${join(dir, 'body')};
  proxy_temp_path ${join(dir, 'proxy')};
  fastcgi_temp_path ${join(dir, 'fastcgi')};
  uwsgi_temp_path ${join(dir, 'uwsgi')};
  scgi_temp_path ${join(dir, 'scgi')};
  keepalive_requests 1000000;
  upstream sim { server 127.0.0.1:${upstreamPort}; keepalive 1024; keepalive_requests 1000000; }
  server {
    listen 127.0.0.1:${listen};
    client_max_body_size 64m;
    location / {
      proxy_pass http://sim;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 300s;
    }
${
  altPort === undefined
    ? ''
    : `    location /a/ {
      proxy_pass http://127.0.0.1:${altPort}/;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
`
}  }
}
`
}

/**
 * Starts nginx on a free port in front of the simulator (and, with `altPort`, that upstream under /a/); resolves once its worker is up, with
 * the master and worker pids (whose CPU and RSS are nginx's). Stop it with SIGTERM (its master
 * takes the worker with it).
 */
export async function startNginx(bin: string, dir: string, upstreamPort: number, altPort?: number): Promise<{ proc: ChildProcess; port: number; pids: number[] }> {
  const port = await freePort()
  mkdirSync(dir, { recursive: true })
  const conf = join(dir, 'nginx.conf')
  writeFileSync(conf, nginxConf(dir, port, upstreamPort, altPort))
  const proc = spawn(bin, ['-p', dir, '-c', conf, '-e', join(dir, 'error.log')], { stdio: ['ignore', 'inherit', 'inherit'] })
  let pids: number[] = []
  for (let i = 0; i < 100 && pids.length < 2; i++) {
    await new Promise((r) => setTimeout(r, 50))
    pids = proc.pid === undefined ? [] : [proc.pid, ...children(proc.pid)]
  }
  return { proc, port, pids }
}

/** Direct children of a process (nginx workers of the master): /proc/PID/stat's field 4 is the parent. */
function children(pid: number): number[] {
  const out: number[] = []
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue
    try {
      const text = readFileSync(`/proc/${name}/stat`, 'utf8')
      if (Number(text.slice(text.lastIndexOf(')') + 2).split(' ')[1]) === pid) out.push(Number(name))
    } catch {
      // gone while listed
    }
  }
  return out
}
