module svc/tools/slowest

go 1.26.0
