//! The identities file: parsing, checking the grants, and the policy's decisions over
//! what it built. Nothing may panic; whatever parses either builds or names what is
//! wrong, and a public grant never allows more than reading and listing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use talon_protocols::access::identities_file::IdentitiesFile;
use talon_protocols::access::{Access, Action, AnonymousAccess, Need, Resource};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(file) = IdentitiesFile::parse(text) else {
        return;
    };
    let Ok(built) = file.build("devstoreaccount1") else {
        return;
    };
    let names = ["", "*", "b", "data", "train/", "train/x"];
    let mut accesses: Vec<Access<'_>> = built.s3.grants.values().map(Access::Granted).collect();
    accesses.push(Access::Granted(&built.azure.grants));
    accesses.push(Access::Granted(&built.azure.sas_grants));
    let public = Access::Anonymous {
        level: AnonymousAccess::Refused,
        public: &built.s3.public,
    };
    accesses.push(public);
    for access in accesses {
        for action in Action::ALL {
            for bucket in names {
                for key in names {
                    for resource in [
                        Resource::Service,
                        Resource::Bucket(bucket),
                        Resource::InBucket(bucket),
                        Resource::Listing {
                            bucket,
                            prefix: key,
                        },
                        Resource::Object { bucket, key },
                    ] {
                        let need = Need { action, resource };
                        let allowed = access.allows(need);
                        assert_eq!(access.check(need).is_ok(), allowed);
                        if matches!(access, Access::Anonymous { .. })
                            && matches!(action, Action::Write | Action::Delete | Action::Admin)
                        {
                            assert!(!allowed, "a public grant allowed {action}");
                        }
                    }
                }
            }
        }
    }
});
