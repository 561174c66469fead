import t from 'tap'
import { spawn } from 'node:child_process'
import { cpSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, relative, resolve } from 'node:path'
import { parse, parseAllDocuments } from 'yaml'
import { validateConfig } from '../../src/config/load-config.ts'
import { ROOT } from '../helpers/paths.ts'
import { startProxy } from '../helpers/proxy.ts'
import { findTool, run } from '../helpers/tools.ts'

const DEPLOY = join(ROOT, 'deploy')
const K8S = join(DEPLOY, 'kubernetes')
const COMPOSE = join(DEPLOY, 'compose')

function walk(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name)
    return statSync(p).isDirectory() ? walk(p) : [p]
  })
}

// The fields of the files this test reads, as it expects them (parsed YAML, not validated: a
// field that is missing fails the assertion that reads it).
type Labels = Record<string, string>
interface Manifest {
  apiVersion?: string
  kind: string
  metadata: { name: string; labels: Labels }
}
interface Probe {
  httpGet: { path: string; port: string }
}
interface Container {
  ports: { name: string; containerPort: number }[]
  readinessProbe: Probe
  livenessProbe: Probe
  lifecycle?: { preStop?: { exec?: { command?: string[] } } }
  resources: { requests: { cpu?: string; memory?: string }; limits: { cpu?: string; memory?: string } }
  securityContext: { readOnlyRootFilesystem: boolean; allowPrivilegeEscalation: boolean }
  env: { name: string; value: string }[]
  volumeMounts: { name: string; mountPath: string }[]
}
interface Deployment extends Manifest {
  spec: {
    replicas: number
    selector: { matchLabels: Labels }
    template: {
      metadata: { labels: Labels }
      spec: { containers: Container[]; terminationGracePeriodSeconds: number; securityContext: { runAsNonRoot: boolean; runAsUser: number }; volumes: { name: string; configMap: { name: string } }[] }
    }
  }
}
interface Service extends Manifest {
  spec: { selector: Labels; ports: { targetPort: string }[] }
}
interface ConfigMap extends Manifest {
  data: Record<string, string>
}
interface ServiceMonitor extends Manifest {
  spec: { selector: { matchLabels: Labels }; endpoints: { port: string; path: string }[] }
}
interface PodDisruptionBudget extends Manifest {
  spec: { selector: { matchLabels: Labels }; minAvailable: number }
}
interface HorizontalPodAutoscaler extends Manifest {
  spec: { scaleTargetRef: { kind: string; name: string }; minReplicas: number }
}
interface RuleGroups {
  groups: unknown[]
}
interface PrometheusRule extends Manifest {
  spec: RuleGroups
}
interface ComposeService {
  volumes?: string[]
  ports?: string[]
  healthcheck?: { disable?: boolean }
  build?: { context: string; dockerfile: string }
  environment: Record<string, string>
  stop_grace_period: string
}
interface Compose {
  services: Record<string, ComposeService>
}
const load = <T>(file: string): T => parse(readFileSync(file, 'utf8')) as T

t.test('every YAML file under deploy/ parses', async (t) => {
  const files = walk(DEPLOY).filter((f) => /\.ya?ml$/.test(f))
  t.ok(files.length >= 15, `${files.length} YAML files`)
  for (const f of files) {
    const docs = parseAllDocuments(readFileSync(f, 'utf8'))
    const list = Array.isArray(docs) ? docs : [docs]
    t.same(
      list.flatMap((d) => d.errors.map((e) => e.message)),
      [],
      `${relative(ROOT, f)} parses`,
    )
  }
  for (const f of walk(DEPLOY).filter((f) => f.endsWith('.json'))) t.doesNotThrow(() => JSON.parse(readFileSync(f, 'utf8')), `${relative(ROOT, f)} parses`)
})

t.test('the Kubernetes manifests fit together and follow the contract', async (t) => {
  const kustomization = load<{ resources: string[] }>(join(K8S, 'kustomization.yaml'))
  const byKind = new Map<string, Manifest>()
  const services: Service[] = []
  for (const r of kustomization.resources) {
    t.ok(existsSync(join(K8S, r)), `${r} exists`)
    const doc = load<Manifest>(join(K8S, r))
    t.ok(doc.apiVersion && doc.kind && doc.metadata?.name, `${r} has apiVersion, kind and name`)
    byKind.set(doc.kind, doc)
    if (doc.kind === 'Service') services.push(doc as Service)
  }
  for (const kind of ['Deployment', 'Service', 'ConfigMap', 'PodDisruptionBudget', 'HorizontalPodAutoscaler', 'ServiceMonitor', 'PrometheusRule', 'NetworkPolicy'])
    t.ok(byKind.has(kind), `kustomization includes a ${kind}`)
  const deployment = byKind.get('Deployment') as Deployment
  const service = services.find((s) => s.metadata.name === 'tokentap') as Service
  const adminService = services.find((s) => s.metadata.name === 'tokentap-admin') as Service
  const configMap = byKind.get('ConfigMap') as ConfigMap

  const config = validateConfig(parse(configMap.data['config.yaml']))
  t.pass('the ConfigMap holds a valid tokentap config')

  const pod = deployment.spec.template.spec
  const [container] = pod.containers
  t.equal(deployment.spec.replicas, 2, 'two replicas')
  t.same(deployment.spec.selector.matchLabels, deployment.spec.template.metadata.labels, 'the selector matches the pod labels')
  const port = (name: string): number | undefined => container.ports.find((p) => p.name === name)?.containerPort
  t.equal(port('http'), config.server.port, 'the http container port is the config\u2019s server.port')
  t.equal(port('admin'), config.admin.port, 'the admin container port is the config\u2019s admin.port')
  t.same([container.readinessProbe.httpGet.path, container.readinessProbe.httpGet.port], ['/readyz', 'admin'], 'readiness on /readyz')
  t.same([container.livenessProbe.httpGet.path, container.livenessProbe.httpGet.port], ['/healthz', 'admin'], 'liveness on /healthz')
  const preStop = Number(container.lifecycle?.preStop?.exec?.command?.[1] ?? 0)
  t.ok(
    pod.terminationGracePeriodSeconds > config.server.drain_seconds + preStop + config.server.drain_linger_seconds,
    `terminationGracePeriodSeconds ${pod.terminationGracePeriodSeconds} > drain ${config.server.drain_seconds} s + preStop ${preStop} s + linger ${config.server.drain_linger_seconds} s`,
  )
  t.ok(container.resources.requests.cpu && container.resources.requests.memory && container.resources.limits.cpu && container.resources.limits.memory, 'resource requests and limits')
  t.equal(pod.securityContext.runAsNonRoot, true, 'runAsNonRoot')
  const imageUser = /^USER (\d+)/m.exec(readFileSync(join(ROOT, 'Dockerfile'), 'utf8'))?.[1]
  t.equal(String(pod.securityContext.runAsUser), imageUser, 'the pod runs as the image\u2019s user')
  t.equal(container.securityContext.readOnlyRootFilesystem, true, 'read-only root filesystem')
  t.equal(container.securityContext.allowPrivilegeEscalation, false)
  const env = Object.fromEntries(container.env.map((e) => [e.name, e.value]))
  const configMount = container.volumeMounts.find((m) => m.name === 'config')
  t.equal(env.TOKENTAP_CONFIG, `${configMount?.mountPath}/config.yaml`, 'TOKENTAP_CONFIG points at the mounted ConfigMap')
  t.equal(pod.volumes.find((v) => v.name === 'config')?.configMap.name, configMap.metadata.name)

  t.same(service.spec.selector, deployment.spec.template.metadata.labels, 'the Service selects the pods')
  t.same(
    service.spec.ports.map((p) => p.targetPort),
    ['http'],
    "the proxy's Service exposes the proxy port only",
  )
  t.same(adminService.spec.selector, deployment.spec.template.metadata.labels, 'the admin Service selects the pods')
  t.same(
    adminService.spec.ports.map((p) => p.targetPort),
    ['admin'],
    'the admin Service exposes the admin port only',
  )
  t.match(configMap.data['config.yaml'], /admin:\s+host: 0\.0\.0\.0/, 'the ConfigMap binds the admin listener to the pod network explicitly')
  t.notOk(
    config.routes.some((r) => r.simulator !== undefined),
    'no simulator route in the production ConfigMap',
  )
  const monitor = byKind.get('ServiceMonitor') as ServiceMonitor
  t.same(monitor.spec.selector.matchLabels, adminService.metadata.labels, 'the ServiceMonitor selects the admin Service')
  t.notSame(monitor.spec.selector.matchLabels, service.metadata.labels, "and not the proxy's")
  t.same(
    monitor.spec.endpoints.map((e) => [e.port, e.path]),
    [['admin', '/metrics']],
    'and scrapes its admin port',
  )
  t.equal((monitor.spec as { jobLabel?: string }).jobLabel, 'app.kubernetes.io/name', 'the job label comes from the Services\u2019 name label')
  t.equal(adminService.metadata.labels['app.kubernetes.io/name'], 'tokentap', 'the scrape job is named tokentap, as the alerts expect')
  const policy = byKind.get('NetworkPolicy') as Manifest & { spec: { podSelector: { matchLabels: Record<string, string> }; ingress: { from?: unknown[]; ports: { port: string }[] }[] } }
  t.same(policy.spec.podSelector.matchLabels, deployment.spec.selector.matchLabels, 'the NetworkPolicy covers the pods')
  const adminRule = policy.spec.ingress.find((r) => r.ports.some((p) => p.port === 'admin'))
  t.ok(adminRule?.from !== undefined && adminRule.from.length > 0, 'the admin port admits only the listed sources')
  const pdb = byKind.get('PodDisruptionBudget') as PodDisruptionBudget
  t.same(pdb.spec.selector.matchLabels, deployment.spec.selector.matchLabels, 'the PDB covers the pods')
  t.ok(pdb.spec.minAvailable < deployment.spec.replicas, 'the PDB lets a node drain')
  const hpa = byKind.get('HorizontalPodAutoscaler') as HorizontalPodAutoscaler
  t.same([hpa.spec.scaleTargetRef.kind, hpa.spec.scaleTargetRef.name], ['Deployment', deployment.metadata.name], 'the HPA scales the Deployment')
  t.ok(hpa.spec.minReplicas >= deployment.spec.replicas, 'the HPA keeps at least the Deployment\u2019s replicas')

  const rulesDir = join(DEPLOY, 'prometheus/rules')
  const shipped = readdirSync(rulesDir)
    .filter((f) => f.endsWith('.yaml'))
    .sort()
    .flatMap((f) => load<RuleGroups>(join(rulesDir, f)).groups)
  t.same((byKind.get('PrometheusRule') as PrometheusRule).spec.groups, shipped, 'the PrometheusRule holds exactly the rules of deploy/prometheus/rules')
})

t.test('the compose setup mounts files that exist, and its configs are valid', async (t) => {
  const compose = load<Compose>(join(COMPOSE, 'docker-compose.yaml'))
  for (const name of ['tokentap', 'prometheus', 'grafana']) t.ok(compose.services[name], `compose runs ${name}`)
  for (const [name, service] of Object.entries(compose.services)) {
    for (const volume of service.volumes ?? []) {
      const source = volume.split(':')[0]
      if (source.startsWith('.')) t.ok(existsSync(resolve(COMPOSE, source)), `${name} mounts ${source}, which exists`)
    }
    if (service.build) t.ok(existsSync(join(resolve(COMPOSE, service.build.context), service.build.dockerfile)), `${name} builds from the Dockerfile`)
  }
  const mounted = (service: string, target: string): string => {
    const v = (compose.services[service].volumes ?? []).find((v) => v.split(':')[1] === target) as string
    return resolve(COMPOSE, v.split(':')[0])
  }
  const config = validateConfig(load<unknown>(mounted('tokentap', '/etc/tokentap/config.yaml')))
  t.ok(
    config.routes.some((r) => r.simulator !== undefined),
    'the compose tokentap has a simulator route',
  )
  t.equal(compose.services.tokentap.environment.TOKENTAP_CONFIG, '/etc/tokentap/config.yaml')
  // With workers, the primary gives them drain_seconds + 5 s, then lingers for the last scrape.
  const { drain_seconds: drainS, drain_linger_seconds: lingerS, workers } = config.server
  const needS = drainS + (workers > 1 ? 5 : 0) + lingerS
  t.ok(Number.parseInt(compose.services.tokentap.stop_grace_period, 10) > needS, `compose waits longer than drain + margin + linger (${needS} s)`)
  const scrapeS = Number.parseInt(load<{ global: { scrape_interval: string } }>(join(COMPOSE, 'prometheus.yml')).global.scrape_interval, 10)
  t.ok(lingerS >= scrapeS, `the linger (${lingerS} s) covers a scrape interval (${scrapeS} s)`)
  t.equal(compose.services.load.healthcheck?.disable, true, 'the load service does not inherit the image\u2019s HEALTHCHECK (it serves no admin port)')
  t.same(
    (compose.services.tokentap.ports ?? []).filter((p) => p.endsWith(`:${config.admin.port}`)),
    [`127.0.0.1:${config.admin.port}:${config.admin.port}`],
    'the admin port (/debug/requests) is published on the host\u2019s loopback only',
  )
  // Grafana loads the dashboard from where the provisioning file says.
  const provider = load<{ providers: { options: { path: string } }[] }>(join(DEPLOY, 'grafana/provisioning/dashboards/tokentap.yaml')).providers[0]
  t.equal(mounted('grafana', provider.options.path), join(DEPLOY, 'grafana/dashboards'), 'the dashboards are mounted where provisioning looks')
  t.equal(mounted('grafana', '/etc/grafana/provisioning'), join(DEPLOY, 'grafana/provisioning'))
  t.equal(mounted('prometheus', '/etc/prometheus/rules'), join(DEPLOY, 'prometheus/rules'), 'Prometheus loads the shipped rules')
  const datasource = load<{ datasources: { url: string; jsonData: { timeInterval: string } }[] }>(join(DEPLOY, 'grafana/provisioning/datasources/prometheus.yaml')).datasources[0]
  t.equal(new URL(datasource.url).hostname, 'prometheus', 'Grafana reaches the compose Prometheus')
  t.equal(datasource.jsonData.timeInterval, `${scrapeS}s`, 'Grafana\u2019s timeInterval is compose\u2019s scrape interval')

  const promtool = findTool(t, 'promtool')
  if (promtool === undefined) return
  // The config as Prometheus sees it in the container: rules/ beside prometheus.yml.
  const dir = mkdtempSync(join(tmpdir(), 'tokentap-compose-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  cpSync(mounted('prometheus', '/etc/prometheus/prometheus.yml'), join(dir, 'prometheus.yml'))
  cpSync(mounted('prometheus', '/etc/prometheus/rules'), join(dir, 'rules'), { recursive: true })
  const r = run(promtool, ['check', 'config', join(dir, 'prometheus.yml')])
  t.equal(r.status, 0, 'promtool check config accepts the compose Prometheus config', { output: r.output })
  const ruleFiles = readdirSync(join(DEPLOY, 'prometheus/rules')).filter((f) => f.endsWith('.yaml'))
  t.match(r.output, new RegExp(`SUCCESS: ${ruleFiles.length} rule files found`), 'every shipped rule file is loaded')
})

t.test('the Dockerfile builds in stages, runs unprivileged and its HEALTHCHECK command works', async (t) => {
  const dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8')
  t.ok((dockerfile.match(/^FROM /gm) ?? []).length >= 2, 'multi-stage')
  t.match(dockerfile, /npm ci --omit=dev/, 'production dependencies only in the runtime image')
  t.match(dockerfile, /^USER 1000:1000$/m, 'runs as the non-root node user, by number')
  t.match(dockerfile, /^EXPOSE 8080 9464$/m)
  t.match(dockerfile, /TOKENTAP_CONFIG=\/etc\/tokentap\/config\.yaml/, 'config at a documented path')
  for (const copied of dockerfile.matchAll(/^COPY (?!--from)(.+) \S+$/gm)) {
    for (const source of copied[1].split(' ')) t.ok(existsSync(join(ROOT, source)), `COPY source ${source} exists`)
  }
  t.ok(existsSync(join(ROOT, '.dockerignore')), '.dockerignore exists')

  // Run the HEALTHCHECK command against a live admin listener, and against a closed port.
  const line = /HEALTHCHECK[^\n]*\\\n\s*CMD (\[.*\])/.exec(dockerfile)
  t.ok(line, 'a HEALTHCHECK in exec form')
  const cmd = JSON.parse((line as RegExpExecArray)[1]) as string[]
  t.equal(cmd[0], 'node', 'the healthcheck needs nothing but node')
  const proxy = await startProxy({ routes: [{ prefix: '/sim', simulator: {} }], log: { level: 'warn' } })
  t.teardown(() => proxy.close())
  const adminPort = new URL(proxy.adminUrl).port
  // A plain node, as in the image (not the test runner's loaders from NODE_OPTIONS).
  const env = { PATH: process.env.PATH, TOKENTAP_ADMIN_PORT: adminPort }
  // Asynchronously: the admin listener runs in this process.
  const check = (): Promise<number | null> => new Promise((resolve) => spawn(process.execPath, cmd.slice(1), { env, stdio: 'ignore', timeout: 20_000 }).once('exit', (code) => resolve(code)))
  t.equal(await check(), 0, 'healthy when /healthz answers')
  await proxy.close()
  t.equal(await check(), 1, 'unhealthy when nothing answers')
})
