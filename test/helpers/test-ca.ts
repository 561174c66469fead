import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

/**
 * A throw-away certificate authority made with openssl at test time (nothing private is
 * committed): a server certificate for `upstream.test`, `localhost` and 127.0.0.1, and a client
 * certificate for mTLS, all signed by the CA. Files live in a temporary folder, removed by `remove()`.
 */
export interface TestCa {
  readonly dir: string
  /** PEM file paths. */
  readonly caCert: string
  readonly serverCert: string
  readonly serverKey: string
  readonly clientCert: string
  readonly clientKey: string
  /** The same, read. */
  read(file: string): Buffer
  remove(): void
}

const openssl = (args: string[], cwd: string): void => {
  execFileSync('openssl', args, { cwd, stdio: 'pipe' })
}

const EC = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes']

function issue(dir: string, name: string, subject: string, ext: string): void {
  openssl(['req', ...EC, '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', subject], dir)
  writeFileSync(join(dir, `${name}.ext`), ext)
  openssl(['x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-out', `${name}.crt`, '-days', '2', '-extfile', `${name}.ext`], dir)
}

export function makeTestCa(): TestCa {
  const dir = mkdtempSync(join(tmpdir(), 'tokentap-test-ca-'))
  openssl(['req', '-x509', ...EC, '-keyout', 'ca.key', '-out', 'ca.crt', '-days', '2', '-subj', '/CN=tokentap test CA'], dir)
  issue(dir, 'server', '/CN=upstream.test', 'subjectAltName=DNS:upstream.test,DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n')
  issue(dir, 'client', '/CN=tokentap-client', 'extendedKeyUsage=clientAuth\n')
  const at = (f: string): string => join(dir, f)
  return {
    dir,
    caCert: at('ca.crt'),
    serverCert: at('server.crt'),
    serverKey: at('server.key'),
    clientCert: at('client.crt'),
    clientKey: at('client.key'),
    read: (file) => readFileSync(file),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  }
}
