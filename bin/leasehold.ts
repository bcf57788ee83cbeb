/**
 * The image's one entrypoint: `leasehold agent` or `leasehold manager` (container
 * args[0]). Each main wires its process and exits by itself.
 */
const entry = process.argv[2];
if (entry === 'agent') {
  await import('../agent/main.ts');
} else if (entry === 'manager') {
  await import('../manager/main.ts');
} else {
  process.stderr.write(
    `leasehold: unknown entrypoint '${entry ?? ''}': the first argument must be agent or manager\n`,
  );
  process.exit(2);
}
