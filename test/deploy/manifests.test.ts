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

// A loose shape of the manifests this test reads.
type Doc = Record<string, any> // eslint-disable-line @typescript-eslint/no-explicit-any
const load = (file: string): Doc => parse(readFileSync(file, 'utf8')) as Doc

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
  const kustomization = load(join(K8S, 'kustomization.yaml'))
  const byKind = new Map<string, Doc>()
  for (const r of kustomization.resources as string[]) {
    t.ok(existsSync(join(K8S, r)), `${r} exists`)
    const doc = load(join(K8S, r))
    t.ok(doc.apiVersion && doc.kind && doc.metadata?.name, `${r} has apiVersion, kind and name`)
    byKind.set(doc.kind, doc)
  }
  for (const kind of ['Deployment', 'Service', 'ConfigMap', 'PodDisruptionBudget', 'HorizontalPodAutoscaler', 'ServiceMonitor', 'PrometheusRule'])
    t.ok(byKind.has(kind), `kustomization includes a ${kind}`)
  const deployment = byKind.get('Deployment') as Doc
  const service = byKind.get('Service') as Doc
  const configMap = byKind.get('ConfigMap') as Doc

  const config = validateConfig(parse(configMap.data['config.yaml']))
  t.pass('the ConfigMap holds a valid tokentap config')

  const pod = deployment.spec.template.spec
  const [container] = pod.containers
  t.equal(deployment.spec.replicas, 2, 'two replicas')
  t.same(deployment.spec.selector.matchLabels, deployment.spec.template.metadata.labels, 'the selector matches the pod labels')
  const port = (name: string): number => container.ports.find((p: Doc) => p.name === name).containerPort
  t.equal(port('http'), config.server.port, 'the http container port is the config\u2019s server.port')
  t.equal(port('admin'), config.admin.port, 'the admin container port is the config\u2019s admin.port')
  t.same([container.readinessProbe.httpGet.path, container.readinessProbe.httpGet.port], ['/readyz', 'admin'], 'readiness on /readyz')
  t.same([container.livenessProbe.httpGet.path, container.livenessProbe.httpGet.port], ['/healthz', 'admin'], 'liveness on /healthz')
  const preStop = Number(container.lifecycle?.preStop?.exec?.command?.[1] ?? 0)
  t.ok(
    pod.terminationGracePeriodSeconds > config.server.drain_seconds + preStop,
    `terminationGracePeriodSeconds ${pod.terminationGracePeriodSeconds} > drain ${config.server.drain_seconds} s + preStop ${preStop} s`,
  )
  t.ok(container.resources.requests.cpu && container.resources.requests.memory && container.resources.limits.cpu && container.resources.limits.memory, 'resource requests and limits')
  t.equal(pod.securityContext.runAsNonRoot, true, 'runAsNonRoot')
  const imageUser = /^USER (\d+)/m.exec(readFileSync(join(ROOT, 'Dockerfile'), 'utf8'))?.[1]
  t.equal(String(pod.securityContext.runAsUser), imageUser, 'the pod runs as the image\u2019s user')
  t.equal(container.securityContext.readOnlyRootFilesystem, true, 'read-only root filesystem')
  t.equal(container.securityContext.allowPrivilegeEscalation, false)
  const env = Object.fromEntries((container.env as Doc[]).map((e) => [e.name, e.value]))
  const configMount = (container.volumeMounts as Doc[]).find((m) => m.name === 'config')
  t.equal(env.TOKENTAP_CONFIG, `${configMount?.mountPath}/config.yaml`, 'TOKENTAP_CONFIG points at the mounted ConfigMap')
  t.equal(pod.volumes.find((v: Doc) => v.name === 'config').configMap.name, configMap.metadata.name)

  t.same(service.spec.selector, deployment.spec.template.metadata.labels, 'the Service selects the pods')
  t.same((service.spec.ports as Doc[]).map((p) => p.targetPort).sort(), ['admin', 'http'], 'the Service exposes the proxy and admin ports')
  const monitor = byKind.get('ServiceMonitor') as Doc
  t.same(monitor.spec.selector.matchLabels, service.metadata.labels, 'the ServiceMonitor selects the Service')
  t.same(
    monitor.spec.endpoints.map((e: Doc) => [e.port, e.path]),
    [['admin', '/metrics']],
    'and scrapes its admin port',
  )
  t.equal(monitor.metadata.name === service.metadata.name && service.metadata.name, 'tokentap', 'the scrape job is named tokentap, as the alerts expect')
  t.same((byKind.get('PodDisruptionBudget') as Doc).spec.selector.matchLabels, deployment.spec.selector.matchLabels, 'the PDB covers the pods')
  t.ok((byKind.get('PodDisruptionBudget') as Doc).spec.minAvailable < deployment.spec.replicas, 'the PDB lets a node drain')
  const hpa = byKind.get('HorizontalPodAutoscaler') as Doc
  t.same([hpa.spec.scaleTargetRef.kind, hpa.spec.scaleTargetRef.name], ['Deployment', deployment.metadata.name], 'the HPA scales the Deployment')
  t.ok(hpa.spec.minReplicas >= deployment.spec.replicas, 'the HPA keeps at least the Deployment\u2019s replicas')

  const rulesDir = join(DEPLOY, 'prometheus/rules')
  const shipped = readdirSync(rulesDir)
    .filter((f) => f.endsWith('.yaml'))
    .sort()
    .flatMap((f) => load(join(rulesDir, f)).groups)
  t.same((byKind.get('PrometheusRule') as Doc).spec.groups, shipped, 'the PrometheusRule holds exactly the rules of deploy/prometheus/rules')
})

t.test('the compose setup mounts files that exist, and its configs are valid', async (t) => {
  const compose = load(join(COMPOSE, 'docker-compose.yaml'))
  for (const name of ['tokentap', 'prometheus', 'grafana']) t.ok(compose.services[name], `compose runs ${name}`)
  for (const [name, service] of Object.entries(compose.services as Record<string, Doc>)) {
    for (const volume of (service.volumes ?? []) as string[]) {
      const source = volume.split(':')[0]
      if (source.startsWith('.')) t.ok(existsSync(resolve(COMPOSE, source)), `${name} mounts ${source}, which exists`)
    }
    if (service.build) t.ok(existsSync(join(resolve(COMPOSE, service.build.context), service.build.dockerfile)), `${name} builds from the Dockerfile`)
  }
  const mounted = (service: string, target: string): string => {
    const v = (compose.services[service].volumes as string[]).find((v) => v.split(':')[1] === target) as string
    return resolve(COMPOSE, v.split(':')[0])
  }
  const config = validateConfig(load(mounted('tokentap', '/etc/tokentap/config.yaml')))
  t.ok(
    config.routes.some((r) => r.simulator !== undefined),
    'the compose tokentap has a simulator route',
  )
  t.equal(compose.services.tokentap.environment.TOKENTAP_CONFIG, '/etc/tokentap/config.yaml')
  const drainS = config.server.drain_seconds
  t.ok(Number.parseInt(compose.services.tokentap.stop_grace_period, 10) > drainS, 'compose waits longer than the drain')
  // Grafana loads the dashboard from where the provisioning file says.
  const provider = load(join(DEPLOY, 'grafana/provisioning/dashboards/tokentap.yaml')).providers[0]
  t.equal(mounted('grafana', provider.options.path), join(DEPLOY, 'grafana/dashboards'), 'the dashboards are mounted where provisioning looks')
  t.equal(mounted('grafana', '/etc/grafana/provisioning'), join(DEPLOY, 'grafana/provisioning'))
  t.equal(mounted('prometheus', '/etc/prometheus/rules'), join(DEPLOY, 'prometheus/rules'), 'Prometheus loads the shipped rules')
  const datasource = load(join(DEPLOY, 'grafana/provisioning/datasources/prometheus.yaml')).datasources[0]
  t.equal(new URL(datasource.url).hostname, 'prometheus', 'Grafana reaches the compose Prometheus')

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
