/** A container's processes from this host's kernel: only a cgroup that names the container counts (docker-cgroup.ts). */
import { describe, expect, it } from 'vitest';
import { cgroupProcesses, containerCgroupDir } from '../../src/sandbox/docker-cgroup.js';

describe('containerCgroupDir', () => {
  it('finds nothing for a process whose cgroup does not name the container: a worker that does not share the engine\'s host asks the engine', () => {
    expect(containerCgroupDir(process.pid, 'a'.repeat(64))).toBeUndefined();
  });
  it('takes only a full container id and a real pid', () => {
    expect(containerCgroupDir(process.pid, '')).toBeUndefined();
    expect(containerCgroupDir(process.pid, 'docker')).toBeUndefined();
    expect(containerCgroupDir(0, 'a'.repeat(64))).toBeUndefined();
    expect(containerCgroupDir(-1, 'a'.repeat(64))).toBeUndefined();
  });
});

describe('cgroupProcesses', () => {
  it('says nothing (undefined) for a cgroup that is gone, so the caller asks the engine', () => {
    expect(cgroupProcesses('/sys/fs/cgroup/no-such-cgroup-of-durable-harness')).toBeUndefined();
  });
});
