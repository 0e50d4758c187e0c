//go:build !unix

package svcconfig

func restrictFileModes() {}
