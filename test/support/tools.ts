/**
 * Tools for tests: helm (dev/helm/build.sh builds it on first use) and any other
 * command run as a child process. The implementation lives in dev/helm/helm.ts, shared
 * with the demo and the benchmarks.
 */
export {
  CHART_DIR as chartDir,
  helm,
  REPO_ROOT as repoRoot,
  type RunResult,
  runTool,
} from '../../dev/helm/helm.ts';
