package store

// CheckFile lets the tests of package store_test, which run the
// conformance suite against this store, verify each store file a test
// leaves behind with the checks of checkInvariants.
var CheckFile = checkStoreFile
