package workload

import "testing"

// Each benchmark is one figure group, with a sub-benchmark per runtime
// and size:
//
//	go test ./bench/workload -run '^$' -bench . -benchtime 1x

func BenchmarkReplay(b *testing.B)               { Run(b, GroupReplay) }
func BenchmarkReplayPreInit(b *testing.B)        { Run(b, GroupReplayPreInit) }
func BenchmarkColdResume(b *testing.B)           { Run(b, GroupColdResume) }
func BenchmarkColdResumePreInit(b *testing.B)    { Run(b, GroupColdPreInit) }
func BenchmarkSnapshotResume(b *testing.B)       { Run(b, GroupSnapshot) }
func BenchmarkSnapshotResumeNoSync(b *testing.B) { Run(b, GroupSnapshotNoSync) }
func BenchmarkSnapshotResumeReload(b *testing.B) { Run(b, GroupSnapshotReload) }
func BenchmarkWarmResume(b *testing.B)           { Run(b, GroupWarmResume) }
func BenchmarkWarmResumeNoSync(b *testing.B)     { Run(b, GroupWarmNoSync) }
func BenchmarkOpRoundTrip(b *testing.B)          { Run(b, GroupOpRoundTrip) }
func BenchmarkStepCommits(b *testing.B)          { Run(b, GroupStepCommits) }
func BenchmarkStepCommitsParallel(b *testing.B)  { Run(b, GroupCommitsParallel) }
func BenchmarkSuspendedMemory(b *testing.B)      { Run(b, GroupSuspendedMemory) }
func BenchmarkParkedMemory(b *testing.B)         { Run(b, GroupParkedMemory) }
func BenchmarkUploadToFirstCall(b *testing.B)    { Run(b, GroupUpload) }
func BenchmarkToolCall(b *testing.B)             { Run(b, GroupToolCall) }
func BenchmarkToolCallNoSync(b *testing.B)       { Run(b, GroupToolCallNoSync) }
func BenchmarkLiveSteps(b *testing.B)            { Run(b, GroupLive+"-steps") }
func BenchmarkLiveFanout(b *testing.B)           { Run(b, GroupLive+"-fanout") }
func BenchmarkLiveAskStep(b *testing.B)          { Run(b, GroupLive+"-askstep") }
