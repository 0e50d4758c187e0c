module github.com/brook-streams/brook/schemas

go 1.26.8
